"""Source options, multi-queue offsets and step planning: pure logic, no Spark job, no Cassandra."""

from __future__ import annotations

import json
import pickle

import pytest

from spark_queue.defaults import MAX_BATCH
from spark_queue.errors import InvalidSetting
from spark_queue.spark.options import DEFAULT_MAX_TRIGGER_DELAY, SourceOptions
from spark_queue.spark.planning import Part, plan
from spark_queue.spark.source import Offset


def parse(**options: str) -> SourceOptions:
    return SourceOptions.parse({"hosts": "127.0.0.1:9042", **options})


def test_queue_takes_a_comma_list_in_order_without_repeats() -> None:
    options = parse(QUEUE=" a, b ,a,c")  # names are case-insensitive
    assert options.queues == ("a", "b", "c")
    assert options.queue == "a"
    assert options.queue_pattern is None


def test_new_options_parse_case_insensitively_with_their_defaults() -> None:
    default = parse(queue="a")
    assert default.fail_on_data_loss is True
    assert default.min_messages_per_trigger is None
    assert default.max_trigger_delay == DEFAULT_MAX_TRIGGER_DELAY

    options = parse(
        queuepattern="orders_.*",
        MINMESSAGESPERTRIGGER="50",
        maxtriggerdelay="2s",
        FailOnDataLoss="False",
    )
    assert (options.queues, options.queue_pattern) == ((), "orders_.*")
    assert options.min_messages_per_trigger == 50
    assert options.max_trigger_delay == 2.0
    assert options.fail_on_data_loss is False


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "option 'queue' is required"),
        ({"queue": "a", "queuePattern": "a.*"}, "not both"),
        ({"queue": "a,,b"}, "option 'queue' = 'a,,b'"),
        ({"queuePattern": "a(["}, "option 'queuePattern' = 'a\\(\\[': not a regular"),
        ({"queue": "a", "failOnDataLoss": "maybe"}, "option 'failOnDataLoss' = 'maybe'"),
        ({"queue": "a", "minMessagesPerTrigger": "0"}, "option 'minMessagesPerTrigger' = '0'"),
        (
            {"queue": "a", "minMessagesPerTrigger": "20", "maxMessagesPerTrigger": "10"},
            "must not exceed maxMessagesPerTrigger",
        ),
        ({"queue": "a", "maxTriggerDelay": "5s"}, "only with 'minMessagesPerTrigger'"),
        (
            {"queue": "a", "minMessagesPerTrigger": "5", "maxTriggerDelay": "soon"},
            "option 'maxTriggerDelay' = 'soon'",
        ),
    ],
)
def test_bad_new_options_are_refused_by_name(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidSetting, match=message):
        parse(**options)


def test_multi_queue_offsets_round_trip_and_name_each_bucket_s_queue() -> None:
    offset = Offset("s", 3, (7, 2), (10, 20), ("a", "b"))
    text = json.dumps(offset.to_dict(), sort_keys=True)
    assert Offset.from_dict(json.loads(text)) == offset
    assert offset.parts(()) == [("a", 7, 10), ("b", 2, 20)]


def test_offsets_of_the_one_queue_format_are_read_as_that_queue_or_refused() -> None:
    old = Offset.from_dict({"stream": "s", "step": 4, "buckets": [1, 2], "shares": [5, 6]})
    assert "queues" not in old.to_dict()  # the same JSON, so Spark sees the same offset
    assert old.parts(("orders",)) == [("orders", 1, 5), ("orders", 2, 6)]
    with pytest.raises(InvalidSetting, match="offset of step 4: written by a bdq source"):
        old.parts(("a", "b"))
    with pytest.raises(InvalidSetting, match="not a bdq offset"):
        Offset.from_dict(
            {"stream": "s", "step": 1, "buckets": [1], "shares": [1], "queues": ["a", "b"]}
        )


def test_plan_deals_buckets_round_robin_over_queues_within_the_limits() -> None:
    found = [[("a", 0, 100), ("a", 1, 100), ("a", 2, 100)], [("b", 5, 10)]]
    assert plan(found, 250, 64) == [Part("a", 0, 100), Part("b", 5, 10), Part("a", 1, 100),
                                    Part("a", 2, 40)]  # fmt: skip
    assert plan(found, 10_000, 2) == [Part("a", 0, 100), Part("b", 5, 10)]
    assert plan([[("a", 0, 10 * MAX_BATCH)]], 10**6, 64) == [Part("a", 0, MAX_BATCH)]
    assert plan([], 100, 64) == []


def test_reader_options_pickle_for_executors() -> None:
    options = parse(queuePattern="x.*", minMessagesPerTrigger="3")
    assert pickle.loads(pickle.dumps(options)) == options
