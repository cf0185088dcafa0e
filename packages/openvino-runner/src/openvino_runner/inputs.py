"""Input preparation: from files, images or seeded random data to checked numpy arrays.

Pure functions over :class:`InputSpec` (what a model input accepts); nothing here imports
OpenVINO, so it is cheap to import and easy to test.

Rules (documented in the README):

* ``.npy`` files hold one array; ``.npz`` files are matched to inputs **by name** (an
  ``.npz`` given for one named input may instead hold a single array).
* Images (``.png``, ``.jpg``, ``.jpeg``, ``.bmp``, ``.gif``, ``.tif``, ``.tiff``,
  ``.webp``) are read with Pillow as RGB (or L for one channel), resized to the input's
  static height and width (or to ``ImageOptions.size``), converted to
  ``(pixel - mean) / scale`` and laid out as NCHW or NHWC (guessed from the shape when not
  given: a dimension 1 of size 1 or 3 means NCHW).
* Random data is drawn from ``numpy.random.default_rng(seed)``: floats uniform in
  [0, 1), signed integers in [0, 10), unsigned in [0, 10), booleans fair coin flips.
* Unknown (dynamic) dimensions are taken from the given file, else from ``shapes``,
  else a default: 1 for the first dimension, 224 for the others; a bounded dimension is
  clipped into its bounds. A -1 in ``shapes`` (``--shape -1,3,224,224``) is unknown too.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from openvino_runner._clikit import fill_free_dims
from openvino_runner.errors import InputError, ModelFileError

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"})

# (lower bound, upper bound or None when unbounded); a static dimension has lower == upper.
Dim = tuple[int, "int | None"]
ArrayLike = Any  # an ndarray, or a str/Path naming a .npy/.npz/image file
# Inputs by name; the key None means "the only input" (or an .npz matched by name).
Feeds = Mapping[str | None, ArrayLike] | Mapping[str, ArrayLike]


@dataclass(frozen=True)
class InputSpec:
    """What one model input accepts: its name, dimensions (``None`` rank: unknown), dtype."""

    name: str
    dims: tuple[Dim, ...] | None
    dtype: np.dtype[Any]
    element_type: str = ""

    @property
    def shape_text(self) -> str:
        """The shape as OpenVINO prints it: ``[?,3,224,224]``, ``[1..,6625]``, ``[...]``."""
        return format_dims(self.dims)


@dataclass(frozen=True)
class ImageOptions:
    """How an image file becomes a tensor: ``(pixel - mean) / scale`` in RGB (or BGR) order."""

    size: tuple[int, int] | None = None  # (height, width); None: the input's static H, W
    layout: str | None = None  # "NCHW" or "NHWC"; None: guessed from the input's shape
    mean: tuple[float, ...] = (0.0,)
    scale: tuple[float, ...] = (1.0,)
    bgr: bool = False


def format_dims(dims: Sequence[Dim] | None) -> str:
    """Format dimensions like OpenVINO's PartialShape: ``[?,3,32..,1..64]``."""
    if dims is None:
        return "[...]"
    parts = []
    for lo, hi in dims:
        if hi is not None and lo == hi:
            parts.append(str(lo))
        elif hi is None:
            parts.append("?" if lo <= 0 else f"{lo}..")
        else:
            parts.append(f"{lo}..{hi}")
    return "[" + ",".join(parts) + "]"


def parse_assignment(text: str, what: str) -> tuple[str | None, str]:
    """Split ``NAME=VALUE`` into ``(NAME, VALUE)``; a bare ``VALUE`` gives ``(None, VALUE)``.

    A value that is an existing path containing ``=`` is kept whole.
    """
    if "=" in text and not Path(text).exists():
        name, value = text.split("=", 1)
        if not name or not value:
            raise InputError(f"{what} must look like NAME=VALUE, got {text!r}")
        return name, value
    return None, text


def _names(specs: Sequence[InputSpec]) -> str:
    return ", ".join(repr(s.name) for s in specs) or "(none)"


def find_spec(specs: Sequence[InputSpec], name: str, what: str = "input") -> InputSpec:
    """Return the spec called *name*, or raise naming the model's real inputs."""
    for spec in specs:
        if spec.name == name:
            return spec
    raise InputError(f"the model has no {what} named {name!r}; its inputs are: {_names(specs)}")


def dims_accept(dims: Sequence[Dim] | None, shape: Sequence[int]) -> bool:
    """True when a concrete *shape* fits the (possibly dynamic) *dims*."""
    if dims is None:
        return True
    if len(dims) != len(shape):
        return False
    return all(lo <= s and (hi is None or s <= hi) for (lo, hi), s in zip(dims, shape, strict=True))


def check_array(spec: InputSpec, array: np.ndarray[Any, Any], source: str) -> None:
    """Raise :class:`InputError` when *array* has the wrong shape or dtype for *spec*."""
    if not dims_accept(spec.dims, array.shape):
        raise InputError(
            f"input {spec.name!r} expects shape {spec.shape_text}, got "
            f"{list(array.shape)} ({source})"
        )
    if array.dtype != spec.dtype:
        raise InputError(
            f"input {spec.name!r} expects dtype {spec.dtype}, got {array.dtype} ({source}); "
            f"convert it, e.g. array.astype(numpy.{spec.dtype})"
        )


def resolve_shape(spec: InputSpec, given: Sequence[int] | None = None) -> tuple[int, ...]:
    """A concrete shape for *spec*: *given* (checked) or the documented defaults; a -1 in
    *given* (a dimension ``--shape`` left free) gets the default too."""
    if given is not None:
        shape = tuple(int(d) for d in given)
        if shape and min(shape) < 0 and spec.dims is not None and len(spec.dims) == len(shape):
            defaults = resolve_shape(spec)
            shape = tuple(defaults[i] if d < 0 else d for i, d in enumerate(shape))
        if not dims_accept(spec.dims, shape):
            raise InputError(
                f"shape {list(shape)} does not fit input {spec.name!r}, which expects "
                f"{spec.shape_text}"
            )
        return shape
    if spec.dims is None:
        raise InputError(
            f"input {spec.name!r} has an unknown rank; give its shape, e.g. "
            f"--shape {spec.name}=1,3,224,224"
        )
    # The free-dimension default shared with deform-conv2d-onnx (the CLI kit's)
    defaults = fill_free_dims([None] * len(spec.dims))
    shape_list = []
    for i, (lo, hi) in enumerate(spec.dims):
        if hi is not None and lo == hi:
            shape_list.append(lo)
            continue
        want = max(defaults[i], lo)
        if hi is not None:
            want = min(want, hi)
        shape_list.append(want)
    return tuple(shape_list)


def random_array(
    shape: Sequence[int], dtype: np.dtype[Any], rng: np.random.Generator
) -> np.ndarray[Any, Any]:
    """Seeded random data filled by element type (see the module docstring)."""
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 10, size=shape).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        values = rng.random(size=shape, dtype=np.float32).astype(dtype)
        # Rounding to a narrower float (f16) can reach 1.0: keep the documented [0, 1).
        below_one = np.nextafter(np.array(1, dtype), np.array(0, dtype))
        return np.minimum(values, below_one)
    raise InputError(f"cannot make random data of dtype {dtype}; give the input as a file")


def _guess_layout(spec: InputSpec) -> str:
    if spec.dims is not None and len(spec.dims) == 4:
        channels_first = spec.dims[1]
        channels_last = spec.dims[3]
        if channels_first[0] == channels_first[1] and channels_first[0] in (1, 3):
            return "NCHW"
        if channels_last[0] == channels_last[1] and channels_last[0] in (1, 3):
            return "NHWC"
    return "NCHW"


def _static(dim: Dim) -> int | None:
    lo, hi = dim
    return lo if hi is not None and lo == hi else None


def load_image(path: Path, spec: InputSpec, options: ImageOptions) -> np.ndarray[Any, Any]:
    """Read *path* with Pillow and lay it out for *spec* (a 4-D image input)."""
    from PIL import Image, UnidentifiedImageError

    if spec.dims is not None and len(spec.dims) != 4:
        raise InputError(
            f"input {spec.name!r} has shape {spec.shape_text}; an image can only feed a 4-D "
            "input (NCHW or NHWC)"
        )
    layout = (options.layout or _guess_layout(spec)).upper()
    if layout not in ("NCHW", "NHWC"):
        raise InputError(f"image layout must be NCHW or NHWC, got {options.layout!r}")
    c_axis, h_axis, w_axis = (1, 2, 3) if layout == "NCHW" else (3, 1, 2)
    channels = _static(spec.dims[c_axis]) if spec.dims is not None else None
    channels = channels or 3
    if channels not in (1, 3):
        raise InputError(
            f"input {spec.name!r} has {channels} channels in layout {layout}; images give 1 or 3"
        )
    try:
        with Image.open(path) as img:
            img = img.convert("L" if channels == 1 else "RGB")
            size = options.size
            if size is None and spec.dims is not None:
                h, w = _static(spec.dims[h_axis]), _static(spec.dims[w_axis])
                size = (h, w) if h is not None and w is not None else None
            if size is not None and (img.height, img.width) != tuple(size):
                img = img.resize((size[1], size[0]), Image.Resampling.BILINEAR)
            pixels = np.asarray(img, dtype=np.float32)
    except UnidentifiedImageError:
        raise InputError(f"{path} is not an image Pillow can read") from None
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    if options.bgr:
        pixels = pixels[:, :, ::-1]
    mean = np.asarray(options.mean, dtype=np.float32)
    scale = np.asarray(options.scale, dtype=np.float32)
    for what, values in (("mean", mean), ("scale", scale)):
        if values.size not in (1, channels):
            raise InputError(f"image {what} needs 1 or {channels} values, got {values.size}")
    if np.any(scale == 0):
        raise InputError("image scale values must be non-zero")
    pixels = (pixels - mean) / scale
    array = pixels[None]  # NHWC
    if layout == "NCHW":
        array = array.transpose(0, 3, 1, 2)
    if np.issubdtype(spec.dtype, np.integer):
        array = np.clip(np.rint(array), np.iinfo(spec.dtype).min, np.iinfo(spec.dtype).max)
    return np.ascontiguousarray(array.astype(spec.dtype))


def _np_load(path: Path) -> Any:
    """``numpy.load`` without pickles; a file numpy cannot read is an :class:`InputError`."""
    kind = path.suffix.lower()
    try:
        return np.load(path, allow_pickle=False)
    except ValueError:
        # numpy's reason for a file that is not .npy at all is "contains pickled data"
        raise InputError(
            f"{path} is not a {kind} file numpy can read without pickles; save arrays with "
            f"numpy.{'save' if kind == '.npy' else 'savez'}"
        ) from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise InputError(f"cannot read {path} as {kind}: {reason}") from None


def load_file(
    path: Path, spec: InputSpec, options: ImageOptions | None = None
) -> np.ndarray[Any, Any]:
    """Load one input's data from a ``.npy``, ``.npz`` or image file."""
    if not path.is_file():
        raise ModelFileError(f"input file {str(path)!r} for {spec.name!r} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return np.asarray(_np_load(path))
    if suffix == ".npz":
        with _np_load(path) as archive:
            if spec.name in archive.files:
                return np.asarray(archive[spec.name])
            if len(archive.files) == 1:
                return np.asarray(archive[archive.files[0]])
            raise InputError(
                f"{path} has no array named {spec.name!r}; it holds: "
                f"{', '.join(repr(n) for n in archive.files)}"
            )
    if suffix in IMAGE_SUFFIXES:
        return load_image(path, spec, options or ImageOptions())
    raise InputError(
        f"cannot read input file {str(path)!r}: expected .npy, .npz or an image "
        f"({', '.join(sorted(IMAGE_SUFFIXES))})"
    )


def expand_npz(specs: Sequence[InputSpec], path: Path) -> dict[str, np.ndarray[Any, Any]]:
    """All arrays of an ``.npz`` given without an input name, matched to inputs by name."""
    if not path.is_file():
        raise ModelFileError(f"input file {str(path)!r} does not exist")
    with _np_load(path) as archive:
        unknown = [n for n in archive.files if n not in {s.name for s in specs}]
        if unknown:
            raise InputError(
                f"{path} holds {', '.join(repr(n) for n in unknown)}, which the model does not "
                f"have; its inputs are: {_names(specs)}"
            )
        return {n: np.asarray(archive[n]) for n in archive.files}


def prepare_inputs(
    specs: Sequence[InputSpec],
    given: Feeds | None = None,
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
    image: ImageOptions | None = None,
) -> dict[str, np.ndarray[Any, Any]]:
    """Build one checked array per model input.

    *given* maps input names to arrays or file paths; the key ``None`` stands for "the only
    input" (or, for an ``.npz``, "match its arrays by name"). Inputs not given get seeded
    random data of the shape from *shapes* or the defaults.
    """
    arrays: dict[str, tuple[np.ndarray[Any, Any], str]] = {}
    items: list[tuple[str | None, ArrayLike]] = list((given or {}).items())
    for name, value in items:
        if name is None:
            if isinstance(value, (str, Path)) and Path(value).suffix.lower() == ".npz":
                for n, arr in expand_npz(specs, Path(value)).items():
                    arrays[n] = (arr, f"array {n!r} of {value}")
                continue
            if len(specs) != 1:
                raise InputError(
                    f"the model has {len(specs)} inputs ({_names(specs)}); name the one "
                    f"{value!s} is for, e.g. --input {specs[0].name}={value!s}"
                )
            name = specs[0].name
        spec = find_spec(specs, name)
        if isinstance(value, (str, Path)):
            arrays[name] = (load_file(Path(value), spec, image), f"from {value}")
        else:
            arrays[name] = (np.asarray(value), "given array")
    for name in shapes or {}:
        find_spec(specs, name)
    rng = np.random.default_rng(seed)
    result: dict[str, np.ndarray[Any, Any]] = {}
    for spec in specs:
        if spec.name in arrays:
            array, source = arrays[spec.name]
            check_array(spec, array, source)
        else:
            shape = resolve_shape(spec, (shapes or {}).get(spec.name))
            array = random_array(shape, spec.dtype, rng)
        result[spec.name] = array
    return result
