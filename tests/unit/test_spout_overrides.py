"""overridden(): which spout subclasses replace a default method (the spouts skip work where none does)."""

from reliable_kafka.spout.overrides import overridden
from reliable_kafka.spout.shell import SpoutShell


class _Base:
    def hook(self) -> None:
        pass

    def other(self) -> None:
        pass


class _Hooked(_Base):
    def hook(self) -> None:
        pass


class _Inherits(_Hooked):
    pass


def test_a_method_replaced_anywhere_below_the_base_counts():
    assert overridden(_Hooked(), _Base, "hook")
    assert overridden(_Inherits(), _Base, "hook")  # replaced by a class between the two
    assert overridden(_Hooked(), _Base, "other", "hook")  # any of the names


def test_the_base_itself_and_untouched_methods_do_not():
    assert not overridden(_Base(), _Base, "hook", "other")
    assert not overridden(_Hooked(), _Base, "other")


def test_the_spout_hooks_it_looks_for_exist_on_the_shell():
    # a rename of a hook would leave overridden() comparing a name that no longer exists
    for name in ("_process", "_completed", "_completed_many"):
        assert callable(getattr(SpoutShell, name))
