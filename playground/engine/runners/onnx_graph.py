"""Edits to a graph onnxruntime-genai's builder wrote, made once after the build (onnx_build.py).

- `trim_head`: the output layer keeps its first `rows` rows (a draft vocabulary), so a draft's head
  costs rows/V of the full one.
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


def head_node(graph):
    """The node that writes the logits (the output layer's matmul)."""
    return next(node for node in graph.node if "logits" in node.output)


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
    """Keep the first `rows` rows of the output layer in the built graph (its weight, scales and
    the logits' width), so the draft's head costs rows/V of the full one. The head is the node that
    writes `logits`: a MatMulNBits (int4: weight [N, blocks, bytes], scales [N, blocks], optional
    zero points, attribute N) or a MatMul by a float weight [H, N]."""
    import onnx
    from onnx import numpy_helper

    path = folder / "model.onnx"
    model = onnx.load(str(path))  # with its weights: the head's are rewritten, the rest saved as they were
    head = head_node(model.graph)
    weights = {init.name: init for init in model.graph.initializer}

    def cut(name: str, axis: int) -> None:
        array = numpy_helper.to_array(weights[name])
        weights[name].CopyFrom(numpy_helper.from_array(np.take(array, range(rows), axis=axis), name))

    if head.op_type == "MatMulNBits":
        for name in head.input[1:4]:
            if name in weights:  # weight, scales, zero points: one leading row each per output
                cut(name, 0)
        next(a for a in head.attribute if a.name == "N").i = rows
    elif head.op_type == "MatMul" and head.input[1] in weights:
        cut(head.input[1], 1)
    else:
        raise ValueError(f"draft_vocab: cannot cut the output layer of this build (a {head.op_type} writes the "
                         "logits); use draft_vocab 0 with runner onnxruntime")
    logits = next(o for o in model.graph.output if o.name == "logits")
    logits.type.tensor_type.shape.dim[-1].dim_value = rows
    (folder / "model.onnx.data").unlink()
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=1024)
