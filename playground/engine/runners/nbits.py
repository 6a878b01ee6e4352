"""The builder's int4 step done one weight at a time (gguf_builder.py installs it in the builder's child).

onnxruntime-genai's builder (0.18) writes the whole graph with float weights, then quantizes it:
`Model.to_nbits` serializes the graph into one protobuf, which materializes every weight in float32
at once (the 1.5B target: 6 GB) beside the float16 weights the loader still holds, and
MatMulNBitsQuantizer adds the int4 ones to that protobuf. The child peaked at 13.4 GB for the
1.5B target, more than a learner's laptop has.

`to_nbits_one_at_a_time` gives each MatMul and Gather the same quantizer ONNX Runtime's
MatMulNBitsQuantizer uses for it (`DefaultWeightOnlyQuantizer.quantize`, fed a graph holding that one
weight), swaps in the node it returns with its int4 initializers, and drops the float weight, whose
lazy tensor (a view of the loader's weight) then frees it. One float32 weight exists at a time, or a
slice of one: a weight read from a GGUF (gguf_weights.GGUFWeight) is dequantized a slice at a time
as it is quantized, so the child holds no float copy of the model. The nodes, attributes and initializers are the
ones the builder's own pass writes (tests/engine/test_gguf_build.py compares the two builds byte for
byte); only the order of initializers differs.

Used only where the builder's own pass is the plain one (the DEFAULT method, QOperator format, no
per-node bit widths, no exact overrides, no subgraphs, no CUDA prepacking); anything else keeps it.
"""

from __future__ import annotations

import numpy as np

MS_DOMAIN = "com.microsoft"
# Outputs of one weight (a MatMul's columns, a Gather's rows) quantized at once: an even count (4-bit
# slices then end on a byte); the 1.5B's 151,936-row embedding goes in 10 slices, its layers in one.
CHUNK_ROWS = 16384
INT4_OPSET = 21  # int4 initializers (a quantized Gather's) need opset 21 and IR version 10
INT4_IR_VERSION = 10


def install(bases: list) -> None:
    """Make the builder's Model quantize one weight at a time where its pass is the plain one, in each
    of `bases` (its base module under every name it is imported by: gguf_builder.builder_modules)."""
    for module in bases:
        model = module.Model
        own, own_initializer = model.to_nbits, model.make_initializer

        def to_nbits(self, own=own):
            return to_nbits_one_at_a_time(self) if plain_pass(self) else own(self)

        def make_initializer(self, tensor, /, name, *, to=None, raw=False, own=own_initializer):
            """The builder's own, noting the tensor a cast initializer is made from (quantized_slices
            reads a slice of it)."""
            import torch

            own(self, tensor, name, to=to, raw=raw)
            if to is not None and not raw and isinstance(tensor, torch.Tensor):
                self.__dict__.setdefault("nbits_sources", {})[name] = tensor

        model.to_nbits, model.make_initializer = to_nbits, make_initializer


def plain_pass(builder) -> bool:
    """Whether the builder's to_nbits would run one DEFAULT MatMulNBitsQuantizer pass and nothing else."""
    attrs = builder.quant_attrs
    return (getattr(builder, "quantization_algo", "default") == "default"
            and not getattr(builder, "int4_customized_weight_config", None)
            and not getattr(builder, "exact_quant_override_names", None)
            and not getattr(builder, "exact_quant_overrides", None)
            and not attrs["use_qdq"]
            and (builder.ep != "cuda" or builder.matmul_attrs.get("weights_prepacked", 0) <= 0)
            and not any(attr.type in (attr.type.GRAPH, attr.type.GRAPHS)
                        for node in builder.model.graph for attr in node.attributes.values()))


def to_nbits_one_at_a_time(builder):
    """The builder's model with each float MatMul and Gather weight replaced by its quantized node."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (DefaultWeightOnlyQuantConfig,
                                                                  DefaultWeightOnlyQuantizer)

    attrs = builder.quant_attrs
    ops = tuple(attrs["op_types_to_quantize"] or ("MatMul",))
    quantizer = DefaultWeightOnlyQuantizer(DefaultWeightOnlyQuantConfig(
        block_size=attrs["matmul_block_size"], is_symmetric=attrs["is_symmetric"],
        accuracy_level=attrs["accuracy_level"], op_types_to_quantize=ops, bits=attrs["bits"]))
    model, excluded = builder.model, set(attrs["nodes_to_exclude"])
    sources = builder.__dict__.pop("nbits_sources", {})
    for node in list(model.graph):
        if node.op_type in ops and node.domain in ("", "ai.onnx") and node.name not in excluded:
            quantize_node(model.graph, node, quantizer, builder.values, sources)
    model.opset_imports[MS_DOMAIN] = 1
    if "Gather" in ops:  # as MatMulNBitsQuantizer.process raises them
        model.opset_imports[""] = max(model.opset_imports.get("", 0), INT4_OPSET)
        model.ir_version = max(model.ir_version, INT4_IR_VERSION)
    return model


def weight_of(node):
    """The input a quantizer would quantize (a Gather's data, a MatMul's B), if it is a constant."""
    index = 0 if node.op_type == "Gather" else 1
    value = node.inputs[index] if len(node.inputs) > index else None
    return value if value is not None and value.is_initializer() and value.const_value is not None else None


def quantize_node(graph, node, quantizer, values: dict, sources: dict) -> None:
    """Quantize `node`'s weight alone with ONNX Runtime's quantizer, splice in what it returns, and drop
    the float weight once nothing reads it. `values` (the builder's own, by name) holds the value a
    tied embedding already reads for the head's int4 weight (its GatherBlockQuantized was written
    naming it before the weight existed); `sources`, the tensors cast initializers are made from."""
    import onnx_ir as ir

    weight = weight_of(node)
    if weight is None:
        return
    quantized = quantized_slices(weight, node.op_type, ir.serde.serialize_node(node), quantizer,
                                 sources.pop(weight.name, None))
    if quantized is None:  # a shape the quantizer skips: left as it is
        return
    made, tensors = quantized
    by_name = {value.name: value for value in node.inputs if value is not None}
    for proto in tensors:
        by_name[proto.name] = initializer(graph, values, proto)
    replace(graph, node, made, by_name)
    if not weight.uses():
        graph.initializers.pop(weight.name)
        weight.const_value = None  # frees the lazy tensor and the loader's weight it views


def quantized_slices(weight, op_type: str, original, quantizer, source=None):
    """The quantizer's nodes and new initializers for `weight`, made CHUNK_ROWS outputs at a time (a
    MatMul's columns, a Gather's rows) and joined, or None where it leaves the node as it is. Each output
    is quantized on its own (its blocks run along the other axis), so the slices join into the whole's
    bytes, while the float32 values exist for one slice at a time: for the 151,936-row embedding and
    head they were the child's peak (0.93 GB each for the 1.5B, copied several times). `source`: the
    torch tensor the weight's lazy initializer casts, read a slice at a time (a GGUFWeight dequantizes
    only that slice); without it the weight is read whole and sliced."""
    import onnx
    from onnx import numpy_helper

    shape, dtype = tuple(weight.const_value.shape), weight.const_value.dtype.numpy()
    if source is None or tuple(source.shape) != shape or dtype not in (np.float16, np.float32):
        source = weight.const_value.numpy()
    axis = 0 if op_type == "Gather" else 1
    outputs = shape[axis] if len(shape) == 2 else 0
    starts = range(0, outputs, CHUNK_ROWS) if outputs > CHUNK_ROWS else [None]
    pieces = []
    for start in starts:
        window = slice(None) if start is None else slice(start, start + CHUNK_ROWS)
        held = onnx.GraphProto(initializer=[numpy_helper.from_array(window_values(source, axis, window, dtype),
                                                                     weight.name)])  # the float32 slice: held here alone
        made = quantizer.quantize(original, [held])
        if len(made) == 1 and made[0] is original:
            return None
        pieces.append([standalone(tensor) for tensor in held.initializer[1:]])
    if len(pieces) > 1:
        for node in made:  # the node was written for the last slice: its output count is the whole's
            for attribute in node.attribute:
                if attribute.name == "N":
                    attribute.i = outputs
    return made, [joined(tensors) for tensors in zip(*pieces)]


def window_values(source, axis: int, window: slice, dtype) -> np.ndarray:
    """`source`'s outputs in `window`, in `dtype`: a numpy array's view, or a torch tensor's slice cast
    as the builder's lazy initializer casts it (`.to`: the same values it would give for the whole)."""
    part = sliced(source, axis, window)
    if isinstance(part, np.ndarray):
        return part
    import torch

    return part.to(torch.from_numpy(np.empty(0, dtype)).dtype).numpy()


def sliced(array, axis: int, window: slice):
    """A view of `array`'s outputs in `window` (from_array copies the slice alone; np.take along the
    columns gathered element by element, 90 s for the 1.5B)."""
    return array[window] if axis == 0 else array[:, window]


def joined(tensors):
    """Tensors of the same name and type, one per slice of outputs, as one: their leading dimensions
    add up and their raw bytes follow each other (row-major, outputs first; a 4-bit tensor's slices
    hold an even count of values, CHUNK_ROWS being even, so the bytes meet on a boundary)."""
    import onnx

    if len(tensors) == 1:
        return tensors[0]
    if not all(t.HasField("raw_data") for t in tensors):
        raise ValueError(f"nbits: cannot join {tensors[0].name}, a tensor written without raw bytes")
    whole = onnx.TensorProto(name=tensors[0].name, data_type=tensors[0].data_type,
                             dims=[sum(t.dims[0] for t in tensors), *tensors[0].dims[1:]])
    whole.raw_data = b"".join(t.raw_data for t in tensors)
    return whole


def standalone(proto):
    """A tensor the quantizer wrote into the graph it was given, copied out of it: a protobuf
    sub-message keeps its whole parent alive, which holds the float32 weight (or slice) it was made
    from. Kept, the 1.5B target's child grew by 4 GB, and a vocabulary-sized weight's slices held every
    slice's float32 copy until they were joined (0.9 GB)."""
    import onnx

    own = onnx.TensorProto()
    own.CopyFrom(proto)
    return own


def initializer(graph, values: dict, proto):
    """The quantizer's new initializer (a standalone proto) as a graph initializer, in the value already
    named for it if any."""
    import onnx_ir as ir

    tensor = ir.serde.deserialize_tensor(proto)
    value = values.get(proto.name) or ir.Value(name=proto.name)
    value.const_value, value.dtype, value.shape = tensor, tensor.dtype, tensor.shape
    values[proto.name] = value
    graph.register_initializer(value)
    return value


def replace(graph, node, made: list, by_name: dict) -> None:
    """Put the quantizer's nodes where `node` was: their outputs that `node` wrote take its outputs'
    places (consumers and graph outputs), the others are new values between them."""
    import onnx
    import onnx_ir as ir

    outputs = {value.name: value for value in node.outputs}
    new_nodes = []
    for proto in made:
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in proto.attribute}
        new = ir.Node(proto.domain, proto.op_type, [by_name.get(name) if name else None for name in proto.input],
                      attributes=ir.convenience.convert_attributes(attributes), name=proto.name,
                      num_outputs=len(proto.output))
        for value, name in zip(new.outputs, proto.output):
            value.name = name if name not in outputs else f"{name}/nbits"  # renamed back below
            by_name[name] = value
        new_nodes.append(new)
    olds = list(node.outputs)
    news = [by_name[value.name] for value in olds]
    ir.convenience.replace_nodes_and_values(graph, node, [node], new_nodes, olds, news)
