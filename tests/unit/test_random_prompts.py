"""Random prompts of N tokens: the spec as a budget writes it, and prompts built to the asked
lengths by a tokenizer that does not map ids to text one to one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.schema.budget import load_budget
from pytest_specbound.measure.random_prompts import RandomProblem, RandomPrompts, build
from pytest_specbound.serving.tokenizers import ApproximateTokenizer

POOL = "the quick brown fox jumps over the lazy dog while seven wizards quietly hex jars " * 3


class MergingTokenizer:
    """A stand-in with a BOS token whose ids decode to words and where two adjacent short
    words read back as one token, so a decoded sequence re-counts differently (as BPE does)."""

    exact = True
    source = "a merging stand-in"

    def __init__(self) -> None:
        self.words = sorted(set(POOL.split()))

    def ids(self, text: str) -> list[int]:
        out, words = [], text.split()
        i = 0
        while i < len(words):
            if i + 1 < len(words) and len(words[i]) + len(words[i + 1]) <= 6:
                out.append(len(self.words))  # a merged pair: one token
                i += 2
                continue
            out.append(self.words.index(words[i]) if words[i] in self.words else 0)
            i += 1
        return out

    def count(self, text: str) -> int:
        return 1 + len(self.ids(text))  # the BOS every completion gets

    def text(self, ids: list[int]) -> str:
        return " ".join(self.words[i % len(self.words)] for i in ids)


def test_prompts_come_out_at_the_asked_lengths_with_the_prefix_shared():
    spec = RandomPrompts(input=64, output=16, range=0.25, prefix=12, seed=3)
    built = build(spec, MergingTokenizer(), 20, POOL)
    assert len(built.prompts) == 20 and built.worst_miss <= 0.02, (built.asked, built.counted)
    low, high = spec.input_range
    assert all(12 + low <= a <= 12 + high for a in built.asked)
    assert len(set(built.asked)) > 3  # the range is drawn, not one length
    outputs = [p.max_tokens for p in built.prompts]
    assert all(12 <= n <= 20 for n in outputs if n is not None) and len(set(outputs)) > 1
    texts = [p.text or "" for p in built.prompts]
    head = texts[0].split()[:3]
    assert all(t.split()[:3] == head for t in texts)  # one prefix before every prompt
    again = build(spec, MergingTokenizer(), 20, POOL)
    assert again.prompts == built.prompts  # seeded: every run, the twin, the baseline
    assert build(spec, MergingTokenizer(), 8, POOL).prompts == built.prompts[:8]
    assert built.note() == ("20 prompts, input lengths counted by a merging stand-in: within "
                            f"{built.worst_miss:.1%} of those asked")


def test_without_a_server_tokenizer_the_lengths_are_estimates_and_say_so():
    tokenizer = ApproximateTokenizer("the server has no tokenize route")
    built = build(RandomPrompts(input=200, output=8), tokenizer, 4, POOL)
    assert not built.exact and built.worst_miss <= 0.02
    assert "estimated with 4 characters a token (the server has no tokenize route)" \
        in built.note()


@given(st.integers(1, 5000), st.integers(1, 2000), st.sampled_from([0.0, 0.1, 0.5, 0.9]),
       st.integers(0, 600), st.integers(0, 2**31))
def test_the_label_reads_back_as_the_spec(n_in, n_out, spread, prefix, seed):
    spec = RandomPrompts(n_in, n_out, spread, prefix, seed)
    if spec.input_range[0] < 1 or spec.output_range[0] < 1:
        return
    assert RandomPrompts.parse(spec.label()) == spec


@pytest.mark.parametrize(("table", "needle"), [
    ({"input": 10}, r"needs output \(tokens\)"),
    ({"input": 10, "output": 5, "ratio": 0.1}, r"unknown key 'ratio'; valid: input, output, "
                                               r"range, prefix, seed"),
    ({"input": 10, "output": 5, "range": 1.0}, r"range must be in \[0, 1\), got 1.0"),
    ({"input": 10.5, "output": 5}, r"input must be a whole number, got 10.5"),
    ({"input": 1, "output": 5, "range": 0.5}, r"input and output must stay at least 1 token"),
])
def test_a_bad_table_names_its_key(table, needle):
    with pytest.raises(RandomProblem, match=needle):
        RandomPrompts.from_table(table)


BASE = '[model]\nname = "llama-3.1-8b"\n[server]\nurl = "http://h:1"\n[classes.r]\n'


def test_a_budget_class_of_random_prompts(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text(BASE + "prompts = {random = {input = 1024, output = 256, range = 0.1, "
                           "prefix = 512}}\n")
    cls = load_budget(path).classes["r"]
    assert cls.random == RandomPrompts(1024, 256, 0.1, 512) and cls.max_tokens == 256
    assert cls.random.mean_context == 512 + 1024 + 128
    path.write_text(BASE + 'prompts = {random = {input = 1024, output = 256}}\nmax_tokens = 9\n')
    with pytest.raises(ConfigError, match=r"classes\.r\.max_tokens: random prompts draw their "
                                          r"own output lengths"):
        load_budget(path)
    path.write_text(BASE + 'prompts = {random = {input = 1024}}\n')
    with pytest.raises(ConfigError, match=r"classes\.r\.prompts: needs output \(tokens\)"):
        load_budget(path)
    path.write_text(BASE + 'prompts = {sharegpt = "x.json"}\n')
    with pytest.raises(ConfigError, match=r"classes\.r\.prompts: a table of prompts is "
                                          r"\{random = "):
        load_budget(path)
