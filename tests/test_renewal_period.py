"""The renewal thread follows a shorter period at once (pure: a stand-in renew, no Spark)."""

from __future__ import annotations

import threading

from spark_queue.spark.renewal import LeaseRenewal


def test_a_shorter_period_takes_effect_without_waiting_out_the_longer_sleep() -> None:
    # Given a renewal thread sleeping through an hour-long period
    renewed = threading.Event()

    def renew(queue: str, step: int) -> tuple[int, int]:
        renewed.set()
        return 1, 0

    renewal = LeaseRenewal(renew, period=3600.0, name="t")
    try:
        renewal.track(1, ["q"])
        assert not renewed.wait(0.3)  # asleep: no round yet

        # When a step with a short visibility timeout asks for a shorter period
        renewal.set_period(0.1)

        # Then a round runs well before the old sleep would have ended
        assert renewed.wait(10.0), "no renewal round after the period was shortened"
    finally:
        renewal.stop()


def test_a_longer_period_waits_from_the_last_round_and_stop_ends_the_sleep() -> None:
    rounds: list[int] = []
    renewal = LeaseRenewal(lambda q, s: rounds.append(s) or (1, 0), period=3600.0, name="t")
    renewal.track(1, ["q"])
    renewal.set_period(7200.0)  # longer: nothing to wake for

    stopper = threading.Thread(target=renewal.stop)
    stopper.start()
    stopper.join(5.0)

    assert not stopper.is_alive(), "stop() waited out the sleep"
    assert rounds == []
