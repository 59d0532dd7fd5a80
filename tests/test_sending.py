"""The send-once state machine and batch checks: pure logic, no Cassandra."""

from __future__ import annotations

import pytest

from spark_queue.engine.sending import SendOncePlan
from spark_queue.store.send_log import SendState


@pytest.mark.parametrize(
    ("state", "write", "release", "only_pending"),
    [
        (SendState.RESERVED, True, True, False),  # new, or died mid-write: write it all again
        (SendState.WRITTEN, False, True, True),  # died around the release: finish it safely
        (SendState.DONE, False, False, False),  # done: a repeat changes nothing
    ],
)
def test_send_once_plan_after_each_recorded_state(
    state: SendState, write: bool, release: bool, only_pending: bool
) -> None:
    plan = SendOncePlan.after(state)

    assert (plan.write, plan.release, plan.release_only_pending) == (write, release, only_pending)


def test_a_first_release_may_be_plain_but_a_repeated_one_never_resets_held_messages() -> None:
    # The first attempt releases messages nobody can see yet; any later one might
    # find a consumer holding one, and must leave its lease alone.
    first = SendOncePlan.after(SendState.RESERVED)
    repeat = SendOncePlan.after(SendState.WRITTEN)

    assert first.release and not first.release_only_pending
    assert repeat.release and repeat.release_only_pending
