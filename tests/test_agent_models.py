"""The agent's plain-PyTorch models: shapes, parameter counts, causality, dummy batches."""

import pytest
import torch

from fleet.agent.models import names
from fleet.agent.models import registry as models
from fleet.agent.models.registry import (
    build_model,
    count_parameters,
    input_spec,
    loss_fn,
    make_batch,
    parse_shape,
)


@pytest.mark.parametrize(
    "name, shape, classes, out_shape",
    [
        ("resnet18", "3x32x32", 10, (2, 10)),
        ("mobilenetv2", "3x32x32", 10, (2, 10)),
        ("small_cnn", "3x32x32", 7, (2, 7)),
        ("small_cnn", "1x28x28", 10, (2, 10)),
        ("char_transformer", "64", 96, (2, 64, 96)),
        ("char_transformer", "16", 40, (2, 16, 40)),
    ],
)
@pytest.mark.slow
def test_forward_backward_shapes(name, shape, classes, out_shape):
    model = build_model(name, classes, shape, seed=0)
    x, y = make_batch(name, 2, shape, classes)
    out = model(x)
    assert tuple(out.shape) == out_shape
    loss = loss_fn(out, y)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.slow
def test_parameter_counts_match_reference_figures():
    # CIFAR ResNet-18 (kuangliu-style, 10 classes): 11,173,962 parameters.
    assert count_parameters(build_model("resnet18", 10)) == 11_173_962
    # MobileNetV2 at 10 classes: torchvision's 3,504,872 minus 1,271,190 classifier weights.
    assert count_parameters(build_model("mobilenetv2", 10)) == 2_236_682
    # The stock ImageNet models: the stem changes shape, not counts (torchvision's figures).
    assert count_parameters(build_model("resnet18", 1000, cifar=False)) == 11_689_512
    assert count_parameters(build_model("mobilenetv2", 1000, cifar=False)) == 3_504_872


@pytest.mark.slow
def test_mobilenetv2_cifar_variant_keeps_resolution_and_width_multiplier_shrinks():
    full = build_model("mobilenetv2", 10)
    feats = full.features(torch.zeros(1, 3, 32, 32))
    assert tuple(feats.shape[-2:]) == (4, 4)  # stride 8 overall, not 32
    half = build_model("mobilenetv2", 10, width_mult=0.5)
    assert count_parameters(half) < count_parameters(full)
    assert tuple(half(torch.zeros(2, 3, 32, 32)).shape) == (2, 10)


def test_transformer_heads_round_up_to_equal_width():
    model = build_model("char_transformer", 96)
    attn = model.blocks[0].attn
    assert (attn.n_heads, attn.head_dim, attn.inner) == (6, 43, 258)
    assert len(model.blocks) == 6
    assert model.tok_emb.embedding_dim == 256


@pytest.mark.slow
def test_transformer_is_causal():
    model = build_model("char_transformer", 50, "64", seed=1).eval()
    x, _ = make_batch("char_transformer", 2, "64", 50, seed=3)
    k = 40
    x2 = x.clone()
    x2[:, k:] = (x2[:, k:] + 7) % 50  # change every token from position k on
    with torch.no_grad():
        a, b = model(x), model(x2)
    assert torch.allclose(a[:, :k], b[:, :k], atol=1e-6)
    assert not torch.allclose(a[:, k:], b[:, k:])


def test_transformer_rejects_sequences_longer_than_its_positions():
    model = build_model("char_transformer", 20, "8")
    with pytest.raises(ValueError, match="exceeds"):
        model(torch.zeros(1, 9, dtype=torch.long))


def test_make_batch_is_seeded_and_typed():
    x1, y1 = make_batch("resnet18", 4, "3x32x32", 10, seed=5)
    x2, y2 = make_batch("resnet18", 4, "3x32x32", 10, seed=5)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.dtype == torch.float32 and tuple(x1.shape) == (4, 3, 32, 32)
    assert y1.dtype == torch.int64 and tuple(y1.shape) == (4,) and int(y1.max()) < 10
    t, tt = make_batch("char_transformer", 3, "64", 30)
    assert t.dtype == torch.int64 and tuple(t.shape) == (3, 64) and tuple(tt.shape) == (3, 64)
    assert 0 <= int(t.min()) and int(t.max()) < 30


def test_parse_shape_and_input_spec():
    assert parse_shape("3x32x32") == (3, 32, 32)
    assert parse_shape("64") == (64,)
    assert parse_shape(" 1 X 28 x 28 ") == (1, 28, 28)
    assert parse_shape([3, 32, 32]) == (3, 32, 32)
    for bad in ("", "3x0x32", "axb", "3x32.5", None):
        with pytest.raises(ValueError, match="input shape"):
            parse_shape(bad)
    assert input_spec("resnet18", None).shape == (3, 32, 32)
    assert input_spec("char-transformer", "64").kind == "text"
    with pytest.raises(ValueError, match="CxHxW"):
        input_spec("resnet18", "64")
    with pytest.raises(ValueError, match="token sequences"):
        input_spec("char_transformer", "3x32x32")
    with pytest.raises(ValueError, match="unknown model"):
        build_model("vgg16")
    assert set(models.MODEL_NAMES) == {
        "resnet18",
        "mobilenetv2",
        "char_transformer",
        "char_transformer_small",
        "small_cnn",
    }
    # one list of names: the torch-free one every --model help shows is what the registry builds
    assert tuple(sorted(models.MODELS)) == names.MODEL_NAMES
    assert models.MODEL_NAMES is names.MODEL_NAMES
    assert models.canonical_name("ResNet18") == "resnet18"


def test_seed_makes_weights_reproducible_without_leaking_global_state():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model("small_cnn", 10, seed=7)
    after = torch.rand(1)
    b = build_model("small_cnn", 10, seed=7)
    assert torch.equal(before, after)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
