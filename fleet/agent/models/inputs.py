"""What each registered model takes as input, without torch: its kind, default shape and classes.

Why apart from ``registry``: validating ``--model``/``--input-shape`` and naming a profile's
shape is all that ``powerfleet profile`` on a replayed board needs of a model, and importing the
registry imports torch (a second of CPU here, several on a Jetson) before the first flag is
checked. The registry builds exactly these models (checked at its import).

Python 3.6 compatible, stdlib only.
"""

from typing import Dict, NamedTuple, Optional, Sequence, Tuple, Union

from fleet.agent.models.names import MODEL_NAMES, canonical_name

DEFAULT_VOCAB_SIZE = 96  # letters, digits, punctuation, space, newline (paper §5.1)

ShapeLike = Union[str, Sequence[int]]

InputSpec = NamedTuple(
    "InputSpec",
    [
        ("kind", str),  # "image" (float [b, C, H, W] + labels [b]) or "text" (ints [b, T])
        ("shape", Tuple[int, ...]),  # per-sample input shape: (C, H, W) or (T,)
        ("input_dtype", str),  # "float32" or "int64"
        ("target_shape", Tuple[int, ...]),  # per-sample target shape: () or (T,)
    ],
)

ModelInput = NamedTuple(
    "ModelInput",
    [
        ("kind", str),
        ("default_shape", Tuple[int, ...]),
        ("default_classes", int),  # classes for images, vocabulary size for text
    ],
)

INPUTS: Dict[str, ModelInput] = {
    "resnet18": ModelInput("image", (3, 32, 32), 10),
    "mobilenetv2": ModelInput("image", (3, 32, 32), 10),
    "char_transformer": ModelInput("text", (64,), DEFAULT_VOCAB_SIZE),
    "char_transformer_small": ModelInput("text", (64,), DEFAULT_VOCAB_SIZE),
    "small_cnn": ModelInput("image", (3, 32, 32), 10),
}

assert tuple(sorted(INPUTS)) == MODEL_NAMES, "INPUTS must cover exactly MODEL_NAMES"


def model_input(name: str) -> ModelInput:
    """The model's input (ValueError naming the known models for an unknown name)."""
    return INPUTS[canonical_name(name)]


def parse_shape(text: Optional[ShapeLike]) -> Tuple[int, ...]:
    """'3x32x32' -> (3, 32, 32); '64' -> (64,). Also accepts 3,32,32 and lists of ints."""
    if isinstance(text, (list, tuple)):
        parts = list(text)
    else:
        raw = str(text).strip().lower().replace("\u00d7", "x").replace(",", "x")
        parts = [p.strip() for p in raw.split("x")] if raw else []
    try:
        dims = tuple(int(p) for p in parts)
    except (TypeError, ValueError):
        dims = ()
    if not dims or any(d < 1 for d in dims) or any(isinstance(p, float) for p in parts):
        raise ValueError(
            "bad input shape '{}': expected positive ints like 3x32x32 or 64".format(text)
        )
    return dims


def input_spec(name: str, input_shape: Optional[ShapeLike] = None) -> InputSpec:
    """How a dummy batch for this model looks; validates the shape against the model's kind."""
    info = model_input(name)
    shape = info.default_shape if input_shape is None else parse_shape(input_shape)
    if info.kind == "image":
        if len(shape) != 3:
            raise ValueError(
                "model {} takes images: input shape must be CxHxW, got {}".format(
                    name, format_shape(shape)
                )
            )
        return InputSpec("image", shape, "float32", ())
    if len(shape) != 1:
        raise ValueError(
            "model {} takes token sequences: input shape must be T (e.g. 64), got {}".format(
                name, format_shape(shape)
            )
        )
    return InputSpec("text", shape, "int64", shape)


def format_shape(shape: Sequence[int]) -> str:
    return "x".join(str(int(d)) for d in shape)


def default_classes(name: str) -> int:
    """Classes for image models, vocabulary size for text models."""
    return model_input(name).default_classes
