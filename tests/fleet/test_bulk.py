"""Bulk work pauses the cyclic collector and always gives it back as it found it."""

import gc

import pytest

from fleet.core.bulk import cyclic_gc_paused


def test_the_collector_is_paused_inside_and_resumed_after_even_on_an_error() -> None:
    assert gc.isenabled()
    with pytest.raises(ValueError), cyclic_gc_paused():
        assert not gc.isenabled()
        raise ValueError("bad input")
    assert gc.isenabled()


def test_a_pause_inside_a_pause_leaves_the_outer_one_in_charge() -> None:
    with cyclic_gc_paused():
        with cyclic_gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
