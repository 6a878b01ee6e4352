"""A GGUF's weights read where they are used (engine/runners/gguf_weights.py): the views the builder's
loader and graph code take stay unread, a row slice dequantizes its rows alone, and every value read
is the one the eager path (as_float, the whole tensor dequantized) gives."""

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf", reason="gguf is in requirements.txt")

from playground.engine.runners import gguf_builder  # noqa: E402
from playground.engine.runners.gguf_weights import GGUFWeight, LoaderTorch, as_float  # noqa: E402

Q8_0 = gguf.GGMLQuantizationType.Q8_0


@pytest.fixture(scope="module")
def tensors(tmp_path_factory):
    """A Q8_0 matrix of 40 x 64, an F16 one and an F32 vector, as gguf's reader gives them."""
    path = tmp_path_factory.mktemp("gguf") / "weights.gguf"
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tensor("q8", gguf.quants.quantize(rng.standard_normal((40, 64)).astype(np.float32), Q8_0),
                      raw_dtype=Q8_0)
    writer.add_tensor("f16", rng.standard_normal((24, 32)).astype(np.float16))
    writer.add_tensor("norm", rng.standard_normal(32).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


class Reads:
    def __init__(self):
        self.count = 0

    def __call__(self):
        self.count += 1


@pytest.mark.parametrize("name", ["q8", "f16"])
def test_views_stay_unread_and_every_value_read_is_the_eager_paths(tensors, name):
    reads, eager = Reads(), torch.from_numpy(np.array(as_float(tensors[name], np.float16)))
    weight = GGUFWeight(tensors[name], np.float16, reads)
    rows, columns = eager.shape
    assert weight.shape == eager.shape and weight.dtype == torch.float16
    # what the loader (its copy, then a reshape and a slice to the whole) and the builder do before
    # any value is needed
    views = {"whole": LoaderTorch().tensor(weight).reshape(rows, columns)[: rows * columns], "T": weight.T,
             "rows": weight[3:17], "rows of rows": weight[3:17][2:5], "T columns": weight.T[:, 5:30],
             "float16": weight.to(torch.float16)}
    assert all(isinstance(v, GGUFWeight) for v in views.values()) and reads.count == 0
    expected = {"whole": eager, "T": eager.T, "rows": eager[3:17], "rows of rows": eager[5:8],
                "T columns": eager.T[:, 5:30], "float16": eager}
    for key, view in views.items():
        assert torch.equal(view.to(torch.float32), expected[key].float()), key
    assert reads.count == len(views)
    # ops that read values: the eager tensor's result
    assert torch.equal(torch.cat([weight[:8], weight[8:]], dim=0), eager)
    assert torch.equal(weight[:, 4:9], eager[:, 4:9])  # a column slice reads the rows, then slices
    assert torch.equal(weight.float() @ torch.ones(columns), eager.float() @ torch.ones(columns))
    detached = weight.detach()  # what ONNX IR's writer reads a tensor's memory through
    assert not isinstance(detached, GGUFWeight) and detached.data_ptr() != 0 and torch.equal(detached, eager)


def test_a_row_slice_dequantizes_its_rows_alone(tensors, monkeypatch):
    asked = []
    real = gguf.quants.dequantize

    def counted(data, kind):
        asked.append(data.shape[0])
        return real(data, kind)

    monkeypatch.setattr(gguf.quants, "dequantize", counted)
    weight = GGUFWeight(tensors["q8"], np.float16)
    part = weight.T[:, 10:26].to(torch.float32)
    assert part.shape == (64, 16) and asked == [16]


def test_the_childs_reader_hands_matrices_over_unread_and_vectors_as_values(tensors):
    lazy = gguf_builder.FloatTensor(tensors["q8"], np.float16, lazy=True).data
    assert isinstance(lazy, GGUFWeight) and lazy.shape == (40, 64)
    norm = gguf_builder.FloatTensor(tensors["norm"], np.float16, lazy=True).data
    assert isinstance(norm, np.ndarray) and norm.shape == (32,)
    eager = gguf_builder.FloatTensor(tensors["q8"], np.float16).data
    assert isinstance(eager, np.ndarray) and np.array_equal(lazy.numpy(), eager) and np.array_equal(lazy, eager)
