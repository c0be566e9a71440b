"""The threshold table as values: a test id survives a copy and a pickle, a request meets the
SLOs a class sets (and every request meets none), and a key or test id in use is refused."""

from __future__ import annotations

import copy
import pickle

import pytest

from pytest_specbound.gate.verdicts.thresholds import Spec, declare, met, sets_slo
from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.measure.sequential import Metric, Threshold
from pytest_specbound.serving.records import RequestRecord


@pytest.mark.parametrize("t", [Threshold.ACCEPT_HIGH, Threshold.TPOT_MS, Threshold.BASELINE_DECODE])
def test_a_test_id_survives_a_pickle_and_a_copy(t):
    for again in (pickle.loads(pickle.dumps(t)), copy.copy(t), copy.deepcopy(t)):
        assert again == t == t.value and (again.metric, again.floor, again.label) == \
            (t.metric, t.floor, t.label)
    assert {t: 1}[t.value] == 1  # decisions are read back by key


def test_a_request_meets_the_slos_the_class_sets_and_every_one_meets_none():
    fast = RequestRecord(completion_tokens=41, ttft_s=0.05, decode_s=0.4)
    slow = RequestRecord(completion_tokens=41, ttft_s=0.05, decode_s=4.0)  # 100 ms a token
    m = Measurement("vllm", [fast, slow])
    assert met({"max_tpot_ms": 50.0}, m) == [True, False] and sets_slo({"max_tpot_ms": 50.0})
    assert met({"max_ttft_ms": 100.0, "max_tpot_ms": 50.0}, m) == [True, False]
    # min_goodput in a level table, its SLO nowhere: every request meets none (goodput 1)
    assert met({"min_goodput": 0.9}, m) == [True, True] and not sets_slo({"min_goodput": 0.9})


def test_a_comparisons_test_id_or_a_built_in_key_is_refused():
    with pytest.raises(ValueError, match="'min_speedup' is already declared"):
        declare(Spec("min_speedup", (Threshold("speedup2", Metric.DECODE_TOK_S),), None))
    with pytest.raises(ValueError, match="'baseline_accept_length' is already declared"):
        declare(Spec("max_x", (Threshold("baseline_accept_length", Metric.ACCEPT_LENGTH),),
                     lambda c: None))
