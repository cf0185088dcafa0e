"""Input preparation without OpenVINO: files, images, random data, dynamic dims."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from openvino_runner.errors import InputError, ModelFileError
from openvino_runner.inputs import (
    ImageOptions,
    InputSpec,
    format_dims,
    parse_assignment,
    prepare_inputs,
    resolve_shape,
)
from PIL import Image

F32 = np.dtype(np.float32)


def spec(name: str, dims: list[tuple[int, int | None]] | None, dtype: object = F32) -> InputSpec:
    return InputSpec(name, None if dims is None else tuple(dims), np.dtype(dtype))  # type: ignore[call-overload]


def static(*shape: int) -> list[tuple[int, int | None]]:
    return [(d, d) for d in shape]


@pytest.fixture
def picture(tmp_path: Path) -> tuple[Path, np.ndarray]:
    pixels = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3) * 2
    path = tmp_path / "pic.png"
    Image.fromarray(pixels, "RGB").save(path)
    return path, pixels


def test_format_dims_like_openvino() -> None:
    assert format_dims([(0, None), (3, 3), (32, None), (1, 64)]) == "[?,3,32..,1..64]"
    assert format_dims(None) == "[...]"


def test_parse_assignment(tmp_path: Path) -> None:
    assert parse_assignment("x=a.npy", "--input") == ("x", "a.npy")
    assert parse_assignment("a.npy", "--input") == (None, "a.npy")
    odd = tmp_path / "k=v.npy"
    odd.write_bytes(b"")
    assert parse_assignment(str(odd), "--input") == (None, str(odd))
    with pytest.raises(InputError, match="NAME=VALUE"):
        parse_assignment("=a.npy", "--input")


def test_resolve_shape_defaults_and_bounds() -> None:
    assert resolve_shape(spec("x", [(0, None), (3, 3), (0, None), (0, None)])) == (1, 3, 224, 224)
    # bounded dims are clipped into their bounds
    assert resolve_shape(spec("x", [(0, None), (1, 64), (300, None)])) == (1, 64, 300)
    assert resolve_shape(spec("x", [(0, None), (0, None)]), [2, 7]) == (2, 7)
    with pytest.raises(InputError, match=r"does not fit input 'x', which expects \[\?,3\]"):
        resolve_shape(spec("x", [(0, None), (3, 3)]), [1, 4])
    with pytest.raises(InputError, match="unknown rank"):
        resolve_shape(spec("x", None))


@pytest.mark.parametrize(
    ("dtype", "low", "high"),
    [(np.float32, 0.0, 1.0), (np.float16, 0.0, 1.0), (np.int64, 0, 10), (np.uint8, 0, 10)],
)
def test_random_data_by_element_type(dtype: type, low: float, high: float) -> None:
    specs = [spec("x", static(64, 64), dtype)]
    first = prepare_inputs(specs, seed=3)["x"]
    assert first.dtype == np.dtype(dtype) and first.shape == (64, 64)
    assert first.min() >= low and first.max() < high
    assert len(np.unique(first)) > 1
    np.testing.assert_array_equal(first, prepare_inputs(specs, seed=3)["x"])
    assert not np.array_equal(first, prepare_inputs(specs, seed=4)["x"])


def test_bool_random_data() -> None:
    data = prepare_inputs([spec("m", static(100), np.bool_)], seed=0)["m"]
    assert data.dtype == np.bool_ and 0 < data.sum() < 100


def test_image_nchw_with_mean_scale_resize(picture: tuple[Path, np.ndarray]) -> None:
    path, pixels = picture
    s = spec("img", static(1, 3, 4, 6))
    opts = ImageOptions(mean=(10.0, 20.0, 30.0), scale=(2.0, 4.0, 8.0))
    got = prepare_inputs([s], {"img": path}, image=opts)["img"]
    want = ((pixels.astype(np.float32) - [10, 20, 30]) / [2, 4, 8]).transpose(2, 0, 1)[None]
    assert got.shape == (1, 3, 4, 6) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # bgr flips the channel order; nhwc guessed from a trailing 3
    nhwc = spec("img", static(1, 4, 6, 3))
    got = prepare_inputs([nhwc], {None: path}, image=ImageOptions(bgr=True))["img"]
    np.testing.assert_array_equal(got[0], pixels[:, :, ::-1].astype(np.float32))
    # a static size different from the file's resizes it
    small = prepare_inputs([spec("img", static(1, 3, 2, 3))], {"img": path})["img"]
    assert small.shape == (1, 3, 2, 3)


def test_image_dynamic_size_and_uint8(picture: tuple[Path, np.ndarray]) -> None:
    path, pixels = picture
    dyn = spec("img", [(0, None), (3, 3), (0, None), (0, None)])
    assert prepare_inputs([dyn], {"img": path})["img"].shape == (1, 3, 4, 6)
    sized = prepare_inputs([dyn], {"img": path}, image=ImageOptions(size=(8, 12)))["img"]
    assert sized.shape == (1, 3, 8, 12)
    u8 = prepare_inputs([spec("img", static(1, 4, 6, 3), np.uint8)], {"img": path})["img"]
    assert u8.dtype == np.uint8
    np.testing.assert_array_equal(u8[0], pixels)


def test_image_errors(picture: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    path, _ = picture
    with pytest.raises(InputError, match=r"4-D"):
        prepare_inputs([spec("v", static(1, 10))], {"v": path})
    with pytest.raises(InputError, match=r"mean needs 1 or 3 values"):
        prepare_inputs(
            [spec("i", static(1, 3, 4, 6))], {"i": path}, image=ImageOptions(mean=(1.0, 2.0))
        )
    fake = tmp_path / "fake.png"
    fake.write_text("not an image")
    with pytest.raises(InputError, match="not an image"):
        prepare_inputs([spec("i", static(1, 3, 4, 6))], {"i": fake})


def test_file_errors(tmp_path: Path) -> None:
    s = [spec("a", static(2)), spec("b", static(2))]
    with pytest.raises(ModelFileError, match="does not exist"):
        prepare_inputs(s, {"a": tmp_path / "missing.npy"})
    (tmp_path / "t.txt").write_text("1 2")
    with pytest.raises(InputError, match=r"expected \.npy, \.npz or an image"):
        prepare_inputs(s, {"a": tmp_path / "t.txt"})
    np.savez(tmp_path / "two.npz", a=np.zeros(2, np.float32), c=np.zeros(2, np.float32))
    with pytest.raises(InputError, match=r"'c', which the model does not have.*'a', 'b'"):
        prepare_inputs(s, {None: tmp_path / "two.npz"})
    with pytest.raises(InputError, match=r"no array named 'b'.*'a', 'c'"):
        prepare_inputs(s, {"b": tmp_path / "two.npz"})
