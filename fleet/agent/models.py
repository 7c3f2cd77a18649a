"""The models the paper trains, in plain PyTorch, plus how to feed them a dummy batch.

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
"""

import math
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULT_VOCAB_SIZE = 96  # letters, digits, punctuation, space, newline (paper §5.1)

ShapeLike = Union[str, Sequence[int]]


# --------------------------------------------------------------------------------------------
# ResNet-18 (CIFAR stem)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super(BasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18; ``cifar=True`` swaps the 7x7/2 stem + max-pool for a 3x3/1 stem.

    The CIFAR stem keeps 32x32 feature maps in the first stage, which is what makes this model
    ~10x slower per image than the stock stem at 32x32 -- the workload the paper profiles.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3, cifar: bool = True) -> None:
        super(ResNet18, self).__init__()
        if cifar:
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False),
                nn.BatchNorm2d(64),
                nn.ReLU(inplace=True),
            )
        else:
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False),
                nn.BatchNorm2d(64),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(3, stride=2, padding=1),
            )
        layers = []
        in_planes = 64
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(BasicBlock(in_planes, planes, stride))
            layers.append(BasicBlock(planes, planes, 1))
            in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)
        _init_conv_bn(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


# --------------------------------------------------------------------------------------------
# MobileNetV2 (CIFAR variant)


def _make_divisible(value: float, divisor: int = 8) -> int:
    """Round channels the way the MobileNetV2 reference does (never drop more than 10%)."""
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if new < 0.9 * value:
        new += divisor
    return new


def _conv_bn_relu6(inp: int, out: int, kernel: int, stride: int, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(inp, out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(out),
        nn.ReLU6(inplace=True),
    )


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, out: int, stride: int, expand_ratio: int) -> None:
        super(InvertedResidual, self).__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_residual = stride == 1 and inp == out
        layers = []
        if expand_ratio != 1:
            layers.append(_conv_bn_relu6(inp, hidden, 1, 1))
        layers.append(_conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden))
        layers.append(nn.Conv2d(hidden, out, 1, 1, 0, bias=False))
        layers.append(nn.BatchNorm2d(out))
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_residual:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 (Sandler et al. 2018); ``cifar=True`` keeps resolution for 32x32 inputs.

    The CIFAR variant uses a stride-1 stem and a stride-1 second stage, so a 32x32 image leaves
    the last stage at 4x4 instead of 1x1. Residuals only where stride is 1 and widths match, as
    in the reference, so the parameter count equals the ImageNet model's minus the classifier.
    """

    # expansion t, output channels c, repeats n, first stride s (ImageNet strides)
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))  # fmt: skip

    def __init__(
        self,
        num_classes: int = 10,
        in_channels: int = 3,
        width_mult: float = 1.0,
        cifar: bool = True,
        dropout: float = 0.2,
    ) -> None:
        super(MobileNetV2, self).__init__()
        if not width_mult > 0:
            raise ValueError("width_mult must be > 0, got {}".format(width_mult))
        inp = _make_divisible(32 * width_mult)
        self.last_channels = _make_divisible(1280 * max(1.0, width_mult))
        layers = [_conv_bn_relu6(in_channels, inp, 3, 1 if cifar else 2)]
        for i, (t, c, n, s) in enumerate(self.SETTINGS):
            if cifar and i == 1:
                s = 1
            out = _make_divisible(c * width_mult)
            for k in range(n):
                layers.append(InvertedResidual(inp, out, s if k == 0 else 1, t))
                inp = out
        layers.append(_conv_bn_relu6(inp, self.last_channels, 1, 1))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(self.last_channels, num_classes)
        )
        _init_conv_bn(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# --------------------------------------------------------------------------------------------
# Character transformer


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention, by hand (no SDPA in torch 1.10).

    The paper's 6 heads over a 256-d embedding do not divide evenly, so each head gets
    ``ceil(256 / 6) = 43`` dims: q/k/v project 256 -> 6*43 = 258 and the output projects 258
    back to 256. That keeps every head the same width and the residual stream at 256, at the
    cost of 2 extra inner dims (< 1% of the attention parameters).
    """

    def __init__(self, d_model: int, n_heads: int, max_len: int, dropout: float = 0.0) -> None:
        super(CausalSelfAttention, self).__init__()
        self.n_heads = n_heads
        self.head_dim = -(-d_model // n_heads)
        self.inner = self.head_dim * n_heads
        self.qkv = nn.Linear(d_model, 3 * self.inner)
        self.proj = nn.Linear(self.inner, d_model)
        self.attn_drop = nn.Dropout(dropout)
        self.resid_drop = nn.Dropout(dropout)
        mask = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, max_len, max_len), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(self.inner, dim=2)
        q = q.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(b, t, self.inner)
        return self.resid_drop(self.proj(y))


class TransformerBlock(nn.Module):
    """Pre-LayerNorm block: trains stably without warm-up, which matters for short fine-tunes."""

    def __init__(self, d_model: int, n_heads: int, max_len: int, dropout: float = 0.0) -> None:
        super(TransformerBlock, self).__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, max_len, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(),
            nn.Linear(4 * d_model, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharTransformer(nn.Module):
    """Decoder-only character model: tokens [b, T] -> logits [b, T, vocab] (next char per slot)."""

    def __init__(
        self,
        vocab_size: int = DEFAULT_VOCAB_SIZE,
        seq_len: int = 64,
        n_layers: int = 6,
        n_heads: int = 6,
        d_model: int = 256,
        dropout: float = 0.0,
    ) -> None:
        super(CharTransformer, self).__init__()
        if vocab_size < 2 or seq_len < 1:
            raise ValueError("char_transformer needs vocab_size >= 2 and seq_len >= 1")
        self.seq_len = seq_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(
            *[TransformerBlock(d_model, n_heads, seq_len, dropout) for _ in range(n_layers)]
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.apply(_init_transformer_weights)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.seq_len:
            raise ValueError("sequence length {} exceeds the model's {}".format(t, self.seq_len))
        pos = torch.arange(t, device=idx.device).unsqueeze(0)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        return self.head(self.ln_f(self.blocks(x)))


# --------------------------------------------------------------------------------------------
# Small CNN for demos


class SmallCNN(nn.Module):
    """Two conv layers and a linear head: trains at thousands of images/s on a laptop CPU."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3, width: int = 16) -> None:
        super(SmallCNN, self).__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(4),
        )
        self.fc = nn.Linear(2 * width * 16, num_classes)
        _init_conv_bn(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


def _init_conv_bn(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
            nn.init.zeros_(m.bias)


def _init_transformer_weights(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, 0.0, 0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
        nn.init.normal_(m.weight, 0.0, 0.02)


# --------------------------------------------------------------------------------------------
# Registry, input shapes and dummy batches

InputSpec = NamedTuple(
    "InputSpec",
    [
        ("kind", str),  # "image" (float [b, C, H, W] + labels [b]) or "text" (ints [b, T])
        ("shape", Tuple[int, ...]),  # per-sample input shape: (C, H, W) or (T,)
        ("input_dtype", str),  # "float32" or "int64"
        ("target_shape", Tuple[int, ...]),  # per-sample target shape: () or (T,)
    ],
)

ModelInfo = NamedTuple(
    "ModelInfo",
    [
        ("build", Callable[..., nn.Module]),  # (classes, shape, **options) -> module
        ("kind", str),
        ("default_shape", Tuple[int, ...]),
        ("default_classes", int),  # classes for images, vocabulary size for text
    ],
)


def _build_resnet18(classes: int, shape: Tuple[int, ...], **options: object) -> nn.Module:
    return ResNet18(num_classes=classes, in_channels=shape[0], **options)


def _build_mobilenetv2(classes: int, shape: Tuple[int, ...], **options: object) -> nn.Module:
    return MobileNetV2(num_classes=classes, in_channels=shape[0], **options)


def _build_char_transformer(classes: int, shape: Tuple[int, ...], **options: object) -> nn.Module:
    return CharTransformer(vocab_size=classes, seq_len=shape[0], **options)


# the CPU-scale text model; options given by the caller (dropout, or other sizes) win
SMALL_TRANSFORMER = {"n_layers": 2, "n_heads": 4, "d_model": 64}


def _build_char_transformer_small(
    classes: int, shape: Tuple[int, ...], **options: object
) -> nn.Module:
    merged = dict(SMALL_TRANSFORMER)
    merged.update(options)
    return CharTransformer(vocab_size=classes, seq_len=shape[0], **merged)


def _build_small_cnn(classes: int, shape: Tuple[int, ...], **options: object) -> nn.Module:
    return SmallCNN(num_classes=classes, in_channels=shape[0], **options)


MODELS: Dict[str, ModelInfo] = {
    "resnet18": ModelInfo(_build_resnet18, "image", (3, 32, 32), 10),
    "mobilenetv2": ModelInfo(_build_mobilenetv2, "image", (3, 32, 32), 10),
    "char_transformer": ModelInfo(_build_char_transformer, "text", (64,), DEFAULT_VOCAB_SIZE),
    "char_transformer_small": ModelInfo(
        _build_char_transformer_small, "text", (64,), DEFAULT_VOCAB_SIZE
    ),
    "small_cnn": ModelInfo(_build_small_cnn, "image", (3, 32, 32), 10),
}

MODEL_NAMES = tuple(sorted(MODELS))


def canonical_name(name: str) -> str:
    """Accept 'ResNet18', 'char-transformer', ...; raise ValueError naming the known models."""
    key = str(name).strip().lower().replace("-", "_")
    if key not in MODELS:
        raise ValueError("unknown model '{}' (known: {})".format(name, ", ".join(MODEL_NAMES)))
    return key


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
    info = MODELS[canonical_name(name)]
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
    return MODELS[canonical_name(name)].default_classes


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
