"""The model registry: the models the paper trains by name (their input shapes live in
``inputs``, without torch), and how to feed them a dummy batch.

Why plain PyTorch: torchvision cannot be imported next to the CPU torch used off-device, and
JetPack 4.6 pins torch 1.10 on the boards, so everything here sticks to APIs that exist in 1.10
and syntax that Python 3.6 accepts. Profiling (paper §4.1) needs only the model's structure and
its input shape, never real data: ``make_batch`` builds a seeded random batch of the right shape
and dtype for any registered model.

Models:
- ``resnet18``: ResNet-18 with the CIFAR stem (3x3 conv, stride 1, no max-pool), ~11.17M params
  at 10 classes.
- ``mobilenetv2``: MobileNetV2 adapted to 32x32 inputs (stride-1 stem and stride-1 second stage,
  as in the common CIFAR ports), width multiplier, ~2.24M params at 10 classes.
- ``char_transformer``: 6 layers, 6 heads, 256-d embedding, sequence length 64, hand-written
  causal attention, next-character logits at every position.
- ``char_transformer_small``: the same architecture scaled to fit a CPU (2 layers, 4 heads,
  64-d embedding, sequence length 64): the offline text analogue trains it many times on 2 cores
  (``simulations/analogue_text.py``), where the paper's 6-layer model would take hours.
- ``small_cnn``: two conv layers; seconds on a laptop CPU, for demos and tests.

Why separate from the architectures: the profiler, the trainer and the protocol only ever ask
for a model by name and a batch of the right shape; the layers live in
``fleet.agent.models.convnets``
and ``fleet.agent.models.char_transformer``.
"""

from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from fleet.agent.models.char_transformer import CharTransformer
from fleet.agent.models.convnets import MobileNetV2, ResNet18, SmallCNN
from fleet.agent.models.inputs import (  # noqa: F401 - re-exported: the registry's own names
    DEFAULT_VOCAB_SIZE,
    INPUTS,
    InputSpec,
    ShapeLike,
    default_classes,
    format_shape,
    input_spec,
    parse_shape,
)
from fleet.agent.models.names import MODEL_NAMES, canonical_name  # noqa: F401 - re-exported

# --------------------------------------------------------------------------------------------
# Registry and dummy batches (what each model takes: ``inputs``)

ModelInfo = NamedTuple(
    "ModelInfo",
    [
        ("build", Callable[..., nn.Module]),  # (classes, shape, **options) -> module
        ("kind", str),
        ("default_shape", Tuple[int, ...]),
        ("default_classes", int),  # classes for images, vocabulary size for text
    ],
)


def _build_resnet18(classes: int, shape: Tuple[int, ...], **options: Any) -> nn.Module:
    return ResNet18(num_classes=classes, in_channels=shape[0], **options)


def _build_mobilenetv2(classes: int, shape: Tuple[int, ...], **options: Any) -> nn.Module:
    return MobileNetV2(num_classes=classes, in_channels=shape[0], **options)


def _build_char_transformer(classes: int, shape: Tuple[int, ...], **options: Any) -> nn.Module:
    return CharTransformer(vocab_size=classes, seq_len=shape[0], **options)


# the CPU-scale text model; options given by the caller (dropout, or other sizes) win
SMALL_TRANSFORMER = {"n_layers": 2, "n_heads": 4, "d_model": 64}


def _build_char_transformer_small(
    classes: int, shape: Tuple[int, ...], **options: Any
) -> nn.Module:
    merged: Dict[str, Any] = dict(SMALL_TRANSFORMER)
    merged.update(options)
    return CharTransformer(vocab_size=classes, seq_len=shape[0], **merged)


def _build_small_cnn(classes: int, shape: Tuple[int, ...], **options: Any) -> nn.Module:
    return SmallCNN(num_classes=classes, in_channels=shape[0], **options)


_BUILDERS = {
    "resnet18": _build_resnet18,
    "mobilenetv2": _build_mobilenetv2,
    "char_transformer": _build_char_transformer,
    "char_transformer_small": _build_char_transformer_small,
    "small_cnn": _build_small_cnn,
}
MODELS: Dict[str, ModelInfo] = {
    name: ModelInfo(build, *INPUTS[name]) for name, build in _BUILDERS.items()
}
assert sorted(MODELS) == sorted(INPUTS), "every model has its input (inputs.INPUTS)"

# MODELS builds exactly MODEL_NAMES (fleet.agent.models.names): tests/test_agent_models.py


def build_model(
    name: str,
    num_classes: Optional[int] = None,
    input_shape: Optional[ShapeLike] = None,
    vocab_size: Optional[int] = None,
    seed: Optional[int] = None,
    **options: object,
) -> nn.Module:
    """Build a registered model for an input shape; text models read vocab_size or num_classes.

    ``options`` go to the model class (``cifar``, ``width_mult``, ``dropout``...). A seed makes
    the initial weights reproducible without touching the caller's global RNG state for long.
    """
    key = canonical_name(name)
    info = MODELS[key]
    spec = input_spec(key, input_shape)
    classes = vocab_size if vocab_size is not None else num_classes
    if classes is None:
        classes = info.default_classes
    if int(classes) < 1:
        raise ValueError("num_classes/vocab_size must be >= 1, got {}".format(classes))
    if seed is None:
        return info.build(int(classes), spec.shape, **options)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return info.build(int(classes), spec.shape, **options)


def make_batch(
    name: str,
    batch_size: int,
    input_shape: Optional[ShapeLike] = None,
    num_classes: Optional[int] = None,
    seed: int = 0,
    device: Union[str, torch.device] = "cpu",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """A seeded random (inputs, targets) batch; time and power do not depend on the values."""
    spec = input_spec(name, input_shape)
    classes = int(num_classes) if num_classes is not None else default_classes(name)
    gen = torch.Generator()
    gen.manual_seed(int(seed))
    if spec.kind == "image":
        inputs = torch.randn((int(batch_size),) + spec.shape, generator=gen)
        targets = torch.randint(0, classes, (int(batch_size),), generator=gen)
    else:
        inputs = torch.randint(0, classes, (int(batch_size),) + spec.shape, generator=gen)
        targets = torch.randint(0, classes, (int(batch_size),) + spec.shape, generator=gen)
    return inputs.to(device), targets.to(device)


def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy for both kinds: [b, K] vs [b], or per-position [b, T, V] vs [b, T]."""
    if outputs.dim() == 3:
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))
    return F.cross_entropy(outputs, targets)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
