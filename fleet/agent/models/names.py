"""The registry's model names, without torch.

Why apart from ``registry``: every ``--model`` flag lists these names in its help, and building
the parser of ``powerfleet train`` (or ``profile``, ``pretrain``...) imported the registry and
with it torch: two seconds before a bad budget or a missing efficiency file could be refused,
for a list of five words. The registry builds each of these names and checks at import that its
table and this list agree.

Python 3.6 compatible, stdlib only.
"""

MODEL_NAMES = (
    "char_transformer",
    "char_transformer_small",
    "mobilenetv2",
    "resnet18",
    "small_cnn",
)


def canonical_name(name):
    # type: (str) -> str
    """Accept 'ResNet18', 'char-transformer', ...; raise ValueError naming the known models."""
    key = str(name).strip().lower().replace("-", "_")
    if key not in MODEL_NAMES:
        raise ValueError("unknown model '{}' (known: {})".format(name, ", ".join(MODEL_NAMES)))
    return key
