"""Edits to a graph onnxruntime-genai's builder wrote, made once after the build (onnx_build.py).

- `cut_head_from`: a draft vocabulary's build made from the model's full int4 build, without the
  builder: the full graph, its head (a MatMulNBits) reading its own first `rows` rows (a draft's head
  then costs rows/V of the full one), written into a folder where the full build's weights file is
  linked (onnx_build.py). The new head tensors go to a second, small file (HEAD_DATA); every other
  initializer, the embedding's included, still reads the full build's file as it was, which matters
  where the embedding shares the head's int4 weights (shared_embeddings: the embedding's Gather
  reads every row, so cutting those tensors in place would cut the embedding).
- `trim_head`: the same cut made in place, in a float32 build of its own (the tiny pair's, whose
  head is a MatMul by a float weight).
- `keep_last_rows`: the head reads only the last `last_rows` positions of the final hidden states
  (a graph input that defaults to every row). The builder's graph computes logits for every fed
  position: 1,000 prompt tokens ask the 151,936-row head for 0.6 GB of float32 logits and the
  matmul's time, where the runner keeps one row. onnxruntime-genai's own loop, which reads the same
  build and feeds no such input, still gets every row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

LAST_ROWS = "last_rows"  # int64 [1]: how many of the last positions the head computes logits for
EVERY_ROW = np.iinfo(np.int64).max  # its default: Slice clamps the start to the first row
HEAD_DATA = "model.onnx.head.data"  # a cut build's own head tensors, beside the full build's linked weights
PER_OUTPUT = (1, 2, 3, 5)  # MatMulNBits' inputs with a leading row per output: weight, scales, zeros, bias
ALIGN = 4096  # each tensor's offset in HEAD_DATA, as onnx's own writer aligns external data


def head_node(graph):
    """The node that writes the logits (the output layer's matmul)."""
    return next(node for node in graph.node if "logits" in node.output)


def loaded_bytes(folder: Path) -> int:
    """The graph file and the external data its initializers read: what a session loads. Not the
    folder's files: an untied model's cut build links the full build's weights, whose whole head
    its graph no longer reads."""
    import onnx

    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    external = sum(int(entry.value) for init in model.graph.initializer for entry in init.external_data
                   if entry.key == "length")
    return (folder / "model.onnx").stat().st_size + external


def keep_last_rows(folder: Path) -> None:
    """Slice the head's input to its last `last_rows` rows: hidden [1, S, H] -> [1, k, H]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    path = folder / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)  # the graph only: the weights stay where they are
    graph = model.graph
    head = head_node(graph)
    graph.input.append(helper.make_tensor_value_info(LAST_ROWS, TensorProto.INT64, [1]))
    constants = {LAST_ROWS: EVERY_ROW, "last_rows/end": EVERY_ROW, "last_rows/axis": 1}
    graph.initializer.extend(numpy_helper.from_array(np.array([v], dtype=np.int64), name)
                             for name, v in constants.items())  # the input's default value among them
    nodes = [helper.make_node("Neg", [LAST_ROWS], ["last_rows/start"], name="/last_rows/Neg"),
             helper.make_node("Slice", [head.input[0], "last_rows/start", "last_rows/end", "last_rows/axis"],
                              ["last_rows/hidden"], name="/last_rows/Slice")]
    at = list(graph.node).index(head)
    for offset, node in enumerate(nodes):
        graph.node.insert(at + offset, node)
    head.input[0] = "last_rows/hidden"
    logits = next(o for o in graph.output if o.name == "logits")
    logits.type.tensor_type.shape.dim[1].dim_param = LAST_ROWS  # no longer the fed length
    onnx.save_model(model, str(path))


def trim_head(folder: Path, rows: int) -> None:
    """Keep the first `rows` columns of a float32 build's head (a MatMul by a float weight [H, N]) and
    the logits' width, in place. An int4 build's head is cut from the full build (cut_head_from)."""
    import onnx
    from onnx import numpy_helper

    path = folder / "model.onnx"
    model = onnx.load(str(path))  # with its weights: the head's are rewritten, the rest saved as they were
    head = head_node(model.graph)
    weights = {init.name: init for init in model.graph.initializer}
    if head.op_type != "MatMul" or head.input[1] not in weights:
        raise uncuttable(head)
    weight = weights[head.input[1]]
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight)[:, :rows], weight.name))
    set_width(model, head, rows)
    (folder / "model.onnx.data").unlink()
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=1024)


def cut_head_from(full: Path, folder: Path, rows: int) -> None:
    """Write `folder`/model.onnx: the full build's graph (keep_last_rows already in it) with its head
    reading new initializers, the first `rows` rows of its weight, scales and zero points, written
    to `folder`/HEAD_DATA. Every other tensor reads the full build's model.onnx.data, which the
    caller has linked into `folder`; the head's old tensors are dropped where nothing else reads them
    (an untied model's), and kept for the embedding where it shares them."""
    import onnx

    model = onnx.load(str(full / "model.onnx"), load_external_data=False)  # the graph only
    head = head_node(model.graph)
    if head.op_type != "MatMulNBits":
        raise uncuttable(head)
    weights = {init.name: init for init in model.graph.initializer}
    old = per_output(head, weights)
    vocab = weights[old[0]].dims[0] if old else rows
    if not 1 <= rows <= vocab:  # a cut past the head's own rows (another family's smaller vocabulary)
        raise ValueError(f"draft_vocab must be in [1, {vocab}] for this draft (its output layer's rows; 0 "
                         f"drafts with all of them), got {rows}")
    cuts = [first_rows(weights[name], full, rows) for name in old]
    write_external(cuts, folder, HEAD_DATA)
    model.graph.initializer.extend(cuts)
    for name, cut in zip(old, cuts):
        head.input[list(head.input).index(name)] = cut.name
    drop_unread(model.graph, old)
    set_width(model, head, rows)
    onnx.save_model(model, str(folder / "model.onnx"))  # external tensors stay references


def per_output(head, weights: dict) -> list[str]:
    """The names of a MatMulNBits' initializers with one leading row per output (PER_OUTPUT)."""
    return [head.input[i] for i in PER_OUTPUT if i < len(head.input) and head.input[i] in weights]


def first_rows(tensor, base: Path, rows: int):
    """A new initializer `<name>/rows<rows>`: the tensor's first `rows` rows (its leading bytes), read
    from its external data in `base`. Read here, not by onnx's loader, which refuses a data file with
    more than one name (a hard link: its guard against a "hardlink attack"), as a cut's is; and only
    those rows are read."""
    from onnx import TensorProto, helper, numpy_helper

    dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
    shape = [rows, *tensor.dims[1:]]
    if tensor.data_location != TensorProto.EXTERNAL:  # a small tensor kept in the graph
        array = numpy_helper.to_array(tensor)[:rows]
    else:
        info = {entry.key: entry.value for entry in tensor.external_data}
        array = np.fromfile(base / info["location"], dtype=dtype, count=int(np.prod(shape)),
                            offset=int(info.get("offset", 0))).reshape(shape)
    return numpy_helper.from_array(np.ascontiguousarray(array), f"{tensor.name}/rows{rows}")


def write_external(tensors: list, folder: Path, location: str) -> None:
    """Move the tensors' bytes into `folder`/`location`, each at an ALIGNed offset, leaving each tensor
    a reference to its place there."""
    from onnx.external_data_helper import set_external_data

    with open(folder / location, "wb") as f:
        for tensor in tensors:
            f.write(b"\0" * (-f.tell() % ALIGN))
            set_external_data(tensor, location, f.tell(), len(tensor.raw_data))
            f.write(tensor.raw_data)
            tensor.ClearField("raw_data")


def drop_unread(graph, names: list[str]) -> None:
    """Remove those of the named initializers that no node reads any more."""
    read = {name for node in graph.node for name in node.input}
    for init in [i for i in graph.initializer if i.name in names and i.name not in read]:
        graph.initializer.remove(init)


def set_width(model, head, rows: int) -> None:
    """The head's output count (a MatMulNBits' N) and the logits' last dimension: `rows`."""
    for attribute in head.attribute:
        if attribute.name == "N":
            attribute.i = rows
    logits = next(o for o in model.graph.output if o.name == "logits")
    logits.type.tensor_type.shape.dim[-1].dim_value = rows


def uncuttable(head) -> ValueError:
    return ValueError(f"draft_vocab: cannot cut the output layer of this build (a {head.op_type} writes the "
                      "logits); use draft_vocab 0 with runner onnxruntime")
