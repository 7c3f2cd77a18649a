"""The one error every dataset reader on the device raises.

Why separate: the image readers, the CIFAR reader, the text readers, the splits and the loader all
raise it, and the coordinator's ``powerfleet data`` and task code catch it; a module of its own
lets each of them depend on it without depending on one another.
"""


class DatasetError(ValueError):
    """A dataset cannot be read: one line naming the file and what was expected."""
