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


# Names a recorded file may use for a registry model: the paper calls its 6-layer character
# transformer "transformer", and the reference profiles and efficiency files say so.
RECORDED_ALIASES = {"transformer": "char_transformer"}


def model_key(name):
    # type: (str) -> str
    """A model name as files and fleets are compared by: case, hyphens and the paper's names
    do not make two models (a name the registry does not know compares as written)."""
    key = str(name).strip().lower().replace("-", "_")
    return RECORDED_ALIASES.get(key, key)


def model_mismatch(recorded, wanted):
    # type: (str, str) -> bool
    """Whether a file recorded for model ``recorded`` must not serve a run of ``wanted``. Why
    it matters: a profile's times and powers, and an efficiency's samples-to-target, are the
    recorded model's; another model's run would take them as its own, silently. A file that
    names no model (an empty ``recorded``) is not judged."""
    if not str(recorded or "").strip() or not str(wanted or "").strip():
        return False
    return model_key(recorded) != model_key(wanted)
