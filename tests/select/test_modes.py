"""Row modes, and mix targets met within one row, deterministically, with clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftset.core.modes import MODES, NO_REASONING, NO_THINKING, THINKING, row_mode
from draftset.core.records import Conversation, PreTokenized, PromptOnly, Reject
from draftset.select.modes import MixError, MixTargets, largest_remainder, select_mix


def conv(answer: dict, system: str | None = None, meta: dict | None = None) -> Conversation:
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", **answer}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    return Conversation("i", "s", 0, messages, meta=meta or {})


def test_row_mode_rules() -> None:
    plain = {"content": "a"}
    assert row_mode(conv({"content": "a", "reasoning_content": "r"})) == THINKING
    assert row_mode(conv({"content": "a", "reasoning_content": ""})) == NO_REASONING
    assert row_mode(conv(plain)) == NO_REASONING
    off_kwargs = {"metadata": {"chat_template_kwargs": {"enable_thinking": False}}}
    assert row_mode(conv(plain, meta=off_kwargs)) == NO_THINKING
    assert row_mode(conv(plain, meta={"metadata": {"thinking": "off"}})) == NO_THINKING
    assert row_mode(conv(plain, meta={"metadata": {"thinking": "on"}})) == NO_REASONING
    assert row_mode(conv(plain, system="detailed thinking off")) == NO_THINKING
    assert row_mode(conv(plain, system="You are helpful. /no_think")) == NO_THINKING
    assert row_mode(conv(plain, system="detailed thinking on")) == NO_REASONING
    assert row_mode(conv(plain), {"enable_thinking": False}) == NO_THINKING
    # recorded reasoning wins over an "off" flag
    both = conv({"content": "a", "reasoning_content": "r"}, meta={"metadata": {"thinking": "off"}})
    assert row_mode(both) == THINKING
    prompt = PromptOnly("p", "s", 1, [{"role": "user", "content": "q"}], meta=off_kwargs)
    assert row_mode(prompt) == NO_THINKING
    assert row_mode(PreTokenized("t", "s", 2, [1], [1])) == NO_REASONING
    with pytest.raises(TypeError):
        row_mode(Reject("s", 3, None, "x", "y"))


def candidates(spec: dict[tuple[str, str], int], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    src, mode = [], []
    for (s, m), n in spec.items():
        src += [s] * n
        mode += [m] * n
    order = np.random.default_rng(seed).permutation(len(src))
    return np.array(src)[order], np.array(mode)[order]


SPEC = {
    ("orca", THINKING): 0,
    ("orca", NO_REASONING): 500,
    ("nemo", THINKING): 300,
    ("nemo", NO_THINKING): 200,
    ("ot", THINKING): 250,
}


def achieved(src: np.ndarray, mode: np.ndarray, sel: np.ndarray) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for s, m in zip(src[sel].tolist(), mode[sel].tolist(), strict=True):
        out[(s, m)] = out.get((s, m), 0) + 1
    return out


def by(counts: dict[tuple[str, str], int], pos: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, n in counts.items():
        out[key[pos]] = out.get(key[pos], 0) + n
    return out


def test_mode_and_source_shares_met_within_one_row() -> None:
    src, mode = candidates(SPEC)
    targets = MixTargets(
        total=601,
        mode_shares={THINKING: 0.5, NO_THINKING: 0.2, NO_REASONING: 0.3},
        source_shares={"orca": 0.3, "nemo": 0.4, "ot": 0.3},
    )
    res = select_mix(src, mode, targets, seed=7)
    got = achieved(src, mode, res.selected)
    assert res.selected.sum() == 601 == res.total
    for m, share in targets.mode_shares.items():  # type: ignore[union-attr]
        assert abs(by(got, 1).get(m, 0) - share * 601) < 1
    for s, share in targets.source_shares.items():  # type: ignore[union-attr]
        assert abs(by(got, 0).get(s, 0) - share * 601) < 1
    lines = {(ln.kind, ln.key): ln for ln in res.lines}
    assert lines[("mode", THINKING)].requested == pytest.approx(300.5)
    assert lines[("mode", THINKING)].achieved in (300, 301)
    assert lines[("source", "nemo")].available == 500
    assert "requested" in res.format_table()
    assert res.report()["total"] == 601


def test_deterministic_and_seed_dependent() -> None:
    src, mode = candidates(SPEC)
    targets = MixTargets(total=400, mode_shares={THINKING: 0.5, NO_REASONING: 0.5})
    a = select_mix(src, mode, targets, seed=1).selected
    b = select_mix(src, mode, targets, seed=1).selected
    c = select_mix(src, mode, targets, seed=2).selected
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert a.sum() == c.sum() == 400


@pytest.mark.parametrize("seed", [-1, -(10**400)])
def test_a_negative_seed_seeds_the_mix_as_it_seeds_the_sampling(seed: int) -> None:
    """`--seed` takes any integer and the weight sampling takes a negative one; a mix ended in
    numpy's "expected non-negative integer" traceback. A negative seed is its own stream."""
    src, mode = candidates(SPEC)
    targets = MixTargets(total=400, mode_shares={THINKING: 0.5, NO_REASONING: 0.5})
    a = select_mix(src, mode, targets, seed=seed).selected
    assert np.array_equal(a, select_mix(src, mode, targets, seed=seed).selected)
    assert a.sum() == 400
    assert not np.array_equal(a, select_mix(src, mode, targets, seed=-seed).selected)


def test_mode_shares_only_spreads_sources_proportionally() -> None:
    src, mode = candidates(SPEC)
    res = select_mix(src, mode, MixTargets(total=100, mode_shares={THINKING: 1.0}))
    got = achieved(src, mode, res.selected)
    assert by(got, 1) == {THINKING: 100}
    assert abs(got[("nemo", THINKING)] - 100 * 300 / 550) <= 1  # in proportion to what exists


def test_counts_and_defaults() -> None:
    src, mode = candidates(SPEC)
    res = select_mix(src, mode, MixTargets(source_counts={"orca": 10, "nemo": 20, "ot": 0}))
    assert by(achieved(src, mode, res.selected), 0) == {"orca": 10, "nemo": 20}
    every = select_mix(src, mode, MixTargets())
    assert every.selected.all()
    # counts first, shares split the rest
    mixed = MixTargets(
        total=110, source_counts={"ot": 10}, source_shares={"orca": 0.5, "nemo": 0.5}
    )
    got = by(achieved(src, mode, select_mix(src, mode, mixed).selected), 0)
    assert got == {"ot": 10, "orca": 50, "nemo": 50}
    # no total with shares: the largest total the shares can be met with
    most = select_mix(src, mode, MixTargets(mode_shares={THINKING: 0.5, NO_THINKING: 0.5}))
    # 401 x 0.5 = 200.5: 201 and 200 are each within one row of it
    assert most.total == 401 and by(achieved(src, mode, most.selected), 1) == {
        THINKING: 201,
        NO_THINKING: 200,
    }


def test_infeasible_targets_raise_clearly() -> None:
    src, mode = candidates(SPEC)
    with pytest.raises(MixError, match="mode 'no_thinking' needs 500 rows but only 200 exist"):
        select_mix(src, mode, MixTargets(total=1000, mode_shares={NO_THINKING: 0.5, THINKING: 0.5}))
    with pytest.raises(MixError, match="source 'ot' needs 300 rows but has only 250"):
        select_mix(
            src, mode, MixTargets(total=1000, source_shares={"ot": 0.3, "orca": 0.5, "nemo": 0.2})
        )
    with pytest.raises(MixError, match="only 1250 candidate rows"):
        select_mix(src, mode, MixTargets(total=2000))
    # a total past int64 and float (`max_samples: 10**400`, an int a recipe takes) is told the
    # same: it was an OverflowError traceback from the plan's arithmetic, made before the check
    for total in (2**63, 10**400):
        for targets in (
            MixTargets(total=total, mode_shares={NO_THINKING: 0.5, THINKING: 0.5}),
            MixTargets(total=total, source_shares={"ot": 0.3, "orca": 0.5, "nemo": 0.2}),
        ):
            with pytest.raises(MixError, match=f"asked for {total} rows but only 1250 candidate"):
                select_mix(src, mode, targets)
            shrunk = select_mix(src, mode, targets, on_infeasible="shrink")
            assert 0 < shrunk.total <= 1250
    # each marginal is possible, the combination is not: orca has no thinking rows
    joint = MixTargets(
        total=500,
        source_shares={"orca": 1.0, "nemo": 0, "ot": 0},
        mode_shares={THINKING: 0.5, NO_REASONING: 0.5},
    )
    with pytest.raises(MixError, match="no selection of 500 rows meets both"):
        select_mix(src, mode, joint)


def test_shrink_fallback() -> None:
    src, mode = candidates(SPEC)
    joint = MixTargets(
        total=500,
        source_shares={"orca": 0.5, "nemo": 0.5, "ot": 0.0},
        mode_shares={THINKING: 0.5, NO_REASONING: 0.5},
    )
    res = select_mix(src, mode, joint, on_infeasible="shrink")
    got = achieved(src, mode, res.selected)
    assert res.total == 500  # feasible after all: nemo thinking 250, orca no_reasoning 250
    assert got == {("orca", NO_REASONING): 250, ("nemo", THINKING): 250}
    tight = MixTargets(total=1000, source_shares={"orca": 0.5, "ot": 0.5, "nemo": 0.0})
    with pytest.raises(MixError):
        select_mix(src, mode, tight)
    shrunk = select_mix(src, mode, tight, on_infeasible="shrink")
    assert shrunk.total == 501 and shrunk.requested_total == 1000 and shrunk.notes  # 250.5 each


def test_malformed_targets() -> None:
    src, mode = candidates(SPEC)
    with pytest.raises(MixError, match="sum to 1"):
        select_mix(src, mode, MixTargets(total=10, mode_shares={THINKING: 0.6}))
    with pytest.raises(MixError, match="no target"):
        select_mix(src, mode, MixTargets(total=10, source_shares={"orca": 1.0}))
    with pytest.raises(MixError, match="unknown mode"):
        select_mix(src, mode, MixTargets(total=10, mode_shares={"deep": 1.0}))
    with pytest.raises(MixError, match="unknown mode"):
        select_mix(np.array(["a"]), np.array(["pondering"]), MixTargets())
    with pytest.raises(MixError, match="give the other sources shares"):
        select_mix(src, mode, MixTargets(total=50, source_counts={"orca": 1, "nemo": 1, "ot": 1}))


def test_largest_remainder() -> None:
    assert largest_remainder([0.5, 0.5], 3) == [2, 1]
    assert largest_remainder([1 / 3] * 3, 10) == [4, 3, 3]
    assert sum(largest_remainder([0.1, 0.2, 0.7], 7)) == 7


@settings(max_examples=60, deadline=None)
@given(
    cells=st.lists(st.integers(0, 40), min_size=len(MODES) * 3, max_size=len(MODES) * 3),
    weights=st.lists(st.integers(1, 10), min_size=3, max_size=3),
    total=st.integers(0, 120),
    seed=st.integers(0, 3),
)
def test_property_targets_met_or_clear_error(
    cells: list[int], weights: list[int], total: int, seed: int
) -> None:
    spec = {(f"s{i // 3}", MODES[i % 3]): n for i, n in enumerate(cells)}
    src, mode = candidates(spec, seed)
    shares = {m: w / sum(weights) for m, w in zip(MODES, weights, strict=True)}
    try:
        res = select_mix(src, mode, MixTargets(total=total, mode_shares=shares), seed=seed)
    except MixError:
        avail = {m: sum(n for (_, mm), n in spec.items() if mm == m) for m in MODES}
        assert total > len(src) or any(
            avail[m] < largest_remainder(list(shares.values()), total)[i]
            for i, m in enumerate(MODES)
        )
        return
    got = by(achieved(src, mode, res.selected), 1)
    assert res.selected.sum() == total
    for m in MODES:
        assert abs(got.get(m, 0) - shares[m] * total) < 1


def test_shares_no_row_can_meet_without_a_total_raise() -> None:
    """Without max_samples, shares no row can meet (a mode with a share and no row) raised
    nothing: the largest feasible total was 0, every row was sampled out, and build ended
    'no rows written ... (rejects above)' with no reject above."""
    src = np.array(["chat"] * 5)
    mode = np.array([NO_REASONING] * 5)
    with pytest.raises(MixError, match=r"mode 'thinking' has a share of 1\.0 but no row"):
        select_mix(src, mode, MixTargets(mode_shares={THINKING: 1.0}))
    with pytest.raises(MixError, match=r"mode 'thinking' has a share of 0\.5 but no row"):
        select_mix(src, mode, MixTargets(mode_shares={THINKING: 0.5, NO_REASONING: 0.5}))
    two = np.array(["chat"] * 5 + ["code"] * 5)
    with pytest.raises(MixError, match=r"no selection meets the mix targets"):
        select_mix(
            two,
            np.array([NO_REASONING] * 5 + [THINKING] * 5),
            MixTargets(source_shares={"chat": 1.0, "code": 0.0}, mode_shares={THINKING: 1.0}),
        )
