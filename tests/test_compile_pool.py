"""`Grammar.compile_pending`'s compile threads: a few lanes, first come first served, and a slow
lane (rust/tokensieve-py/src/compile_pool.rs).

Each check runs in a child process, with `TOKENSIEVE_COMPILE_THREADS` set there (the lanes are
read once per process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

PRELUDE = textwrap.dedent(
    """
    import json, random, sys, time
    sys.path.insert(0, {tests!r})
    import tokensieve as ts
    from tokensieve._core import compile_pool_stats
    from feed import byte_vocabulary

    vocab = byte_vocabulary()

    def enum_schema(seed, n=1500):
        r = random.Random(seed)
        words = ["".join(r.choice("abcdefgh") for _ in range(12)) for _ in range(n)]
        return json.dumps({{"enum": words}})
    """
)


def run_child(body: str, lanes: str) -> dict:
    code = PRELUDE.format(tests=str(HERE)) + textwrap.dedent(body)
    env = dict(os.environ, TOKENSIEVE_COMPILE_THREADS=lanes)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_one_lane_runs_compiles_one_at_a_time_in_the_order_asked() -> None:
    r = run_child(
        """
        # small texts (submitted in microseconds) that take a millisecond or two to compile
        schemas = [json.dumps({"type": "integer", "multipleOf": 1201 + 2 * i}) for i in range(12)]
        pend = [ts.Grammar.compile_pending("json_schema", s, vocab) for s in schemas]
        waiting = compile_pool_stats()["waiting"]
        seen, order = [], []
        while len(order) < len(pend):
            # last to first: a compile seen done means every earlier one was done before it
            # started, if they run one after another
            done = {i for i in reversed(range(len(pend))) if pend[i].done()}
            if done != set(order):
                order += sorted(done - set(order))
                seen.append(sorted(done))
        for p in pend:
            g = p.result()
            assert g.matcher().accept_tokens(list(b"0")) == 1
        print(json.dumps({"seen": seen, "queued": waiting, **compile_pool_stats()}))
        """,
        "1",
    )
    assert r["lanes"] == 1
    assert r["most_in_lanes"] == 1, r
    assert r["waiting"] == 0 and r["in_lanes"] == 0, r
    assert r["queued"] > 0, r  # submitted faster than one lane compiles them: they waited
    if r["moved_to_slow"] == 0:  # no compile outlived its lane: strictly one after another
        assert all(s == list(range(len(s))) for s in r["seen"]), r["seen"]


def test_a_slow_compile_leaves_its_lane_and_a_later_quick_one_does_not_wait_for_it() -> None:
    r = run_child(
        """
        slow = ts.Grammar.compile_pending(
            "ebnf", 'root ::= x{200000}\\nx ::= "(" x ")" | "y"\\n', vocab, max_compile_seconds=2
        )
        t0 = time.perf_counter()
        quick = ts.Grammar.compile_pending("json_schema", enum_schema(7, 50), vocab)
        quick.result()
        quick_s = time.perf_counter() - t0
        slow_running = not slow.done()
        try:
            slow.result()
            slow_error = None
        except ts.TokensieveError as e:
            slow_error = type(e).__name__
        print(json.dumps({"quick_s": quick_s, "slow_running": slow_running,
                          "slow_error": slow_error, **compile_pool_stats()}))
        """,
        "1",
    )
    assert r["slow_running"], r  # the quick compile finished first, beside the slow one
    assert r["moved_to_slow"] >= 1, r
    assert r["quick_s"] < 1.5, r
    assert r["slow_error"] == "BudgetError", r  # its own deadline still holds


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread policies: Linux only")
def test_compile_threads_run_under_the_batch_policy_and_the_caller_keeps_its_own() -> None:
    """A compile thread handed a job does not preempt the thread that handed it over (which in
    a server holds the GIL): the workers run under SCHED_BATCH; the calling thread and the
    keeper keep the normal policy."""
    r = run_child(
        """
        import os, threading

        ts.Grammar.compile_pending("json_schema", enum_schema(5, 50), vocab).result()

        def read_policies():
            policies = {}
            for tid in os.listdir("/proc/self/task"):
                try:
                    name = open(f"/proc/self/task/{tid}/comm").read().strip()
                    policies.setdefault(name, []).append(os.sched_getscheduler(int(tid)))
                except OSError:
                    continue
            return policies

        # a new thread takes its name once it first runs (on busy cores, maybe after the
        # compile is done): wait up to 5 s for both compile threads to have theirs
        deadline = time.monotonic() + 5
        policies = read_policies()
        while len(policies.get("tokensieve-comp", [])) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
            policies = read_policies()
        print(json.dumps({"policies": policies, "main": os.sched_getscheduler(0),
                          "me": threading.get_native_id(), "batch": os.SCHED_BATCH,
                          "other": os.SCHED_OTHER}))
        """,
        "1",
    )
    compile_threads = r["policies"].get("tokensieve-comp", [])
    # the worker (batch) and the keeper (normal): both named "tokensieve-compile..." (cut at 15)
    assert sorted(compile_threads) == sorted([r["batch"], r["other"]]), r
    assert r["main"] == r["other"], r


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread priorities: Linux only")
def test_a_slow_compile_runs_at_a_low_priority_on_a_thread_that_ends_with_it() -> None:
    r = run_child(
        """
        import os

        def compile_thread_nices():
            # the nice value (field 19 of /proc/<pid>/task/<tid>/stat) of each compile thread
            # (the keeper's and the workers' names both read "tokensieve-comp", cut at 15)
            out = []
            for tid in os.listdir("/proc/self/task"):
                try:
                    stat = open(f"/proc/self/task/{tid}/stat").read()
                except OSError:
                    continue
                name = stat[stat.index("(") + 1 : stat.rindex(")")]
                if name.startswith("tokensieve-comp"):
                    out.append(int(stat[stat.rindex(")") + 2 :].split()[16]))
            return sorted(out)

        quick = ts.Grammar.compile_pending("json_schema", enum_schema(3, 50), vocab)
        quick.result()
        before = compile_thread_nices()
        slow = ts.Grammar.compile_pending(
            "ebnf", 'root ::= x{200000}\\nx ::= "(" x ")" | "y"\\n', vocab, max_compile_seconds=2
        )
        time.sleep(0.3)
        during = compile_thread_nices()
        try:
            slow.result()
        except ts.TokensieveError:
            pass
        time.sleep(0.2)
        after = compile_thread_nices()
        later = ts.Grammar.compile_pending("json_schema", enum_schema(4, 50), vocab)
        later.result()
        print(json.dumps({"before": before, "during": during, "after": after,
                          "still_running": not slow.done(), **compile_pool_stats()}))
        """,
        "1",
    )
    assert all(n == 0 for n in r["before"]), r
    assert r["during"].count(10) == 1, r  # the slow compile's thread, lowered
    assert 10 not in r["after"], r  # that thread ended with its compile
    assert r["moved_to_slow"] >= 1, r


def test_the_lanes_default_to_one_less_than_the_cores_and_a_bad_setting_is_ignored() -> None:
    body = (
        "import os; cores = len(os.sched_getaffinity(0))\n"
        "print(json.dumps({**compile_pool_stats(), 'cores': cores}))"
    )
    for setting in ("", "0", "-3", "many"):
        r = run_child(body, setting)
        assert 1 <= r["lanes"] <= max(1, r["cores"] - 1), (setting, r)
    assert run_child(body, "5")["lanes"] == 5


def test_wait_gives_up_at_its_timeout_and_reports_a_finished_compile() -> None:
    r = run_child(
        """
        slow = ts.Grammar.compile_pending(
            "ebnf", 'root ::= x{200000}\\nx ::= "(" x ")" | "y"\\n', vocab, max_compile_seconds=1
        )
        t0 = time.perf_counter()
        early = slow.wait(0.05)
        waited_s = time.perf_counter() - t0
        late = slow.wait(5)
        quick = ts.Grammar.compile_pending("regex", "[0-9]+", vocab)
        quick_done = quick.wait(5)
        errors = []
        for bad in (-1.0, float("nan"), float("inf")):
            try:
                quick.wait(bad)
            except ValueError as e:
                errors.append(str(e))
        print(json.dumps({"early": early, "waited_s": waited_s, "late": late,
                          "slow_done": slow.done(), "quick_done": quick_done, "errors": errors}))
        """,
        "1",
    )
    assert r["early"] is False and 0.04 < r["waited_s"] < 1.0, r
    assert r["late"] is True and r["slow_done"] is True, r  # finished (its deadline's error)
    assert r["quick_done"] is True, r
    assert len(r["errors"]) == 3 and all("timeout" in e for e in r["errors"]), r


def test_an_inline_compile_done_in_time_never_reaches_the_threads_and_a_slow_one_starts_again() -> (
    None
):
    """``inline_seconds``: the compile runs first on the calling thread. One done in time comes
    back done, with no compile handed to the threads; the grammar is the same as a compile on a
    thread (same masks along a text). One still running at ``inline_seconds`` starts again from
    the start on a compile thread under its own budgets: it comes back pending, and its error
    names the constraint's own deadline (1 s), never the inline limit. Errors that come in time
    (syntax, a budget the compile meets at once) are the compile's own."""
    r = run_child(
        """
        import numpy as np
        slow_grammar = 'root ::= x{200000}\\nx ::= "(" x ")" | "y"\\n'
        schema = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}},
                             "required": ["a"]})
        before = compile_pool_stats()["submitted"]
        quick = ts.Grammar.compile_pending("json_schema", schema, vocab, inline_seconds=0.5)
        quick_done = quick.done()
        after_quick = compile_pool_stats()["submitted"]
        threaded = ts.Grammar.compile_pending("json_schema", schema, vocab).result()
        after_threaded = compile_pool_stats()["submitted"]

        def masks(g):
            return masks_of(g, b'{"a": 12}')

        def masks_of(g, text):
            m, out = g.matcher(), []
            for b in text:
                row = np.zeros(ts.bitmask_words(vocab.vocab_size), dtype=np.int32)
                m.fill_next_token_bitmask(row)
                out.append(row.tolist())
                assert m.accept_token(b)
            return out, m.is_accepting()

        same = masks(quick.result()) == masks(threaded)
        t0 = time.perf_counter()
        slow = ts.Grammar.compile_pending(
            "ebnf", slow_grammar, vocab, inline_seconds=0.005, max_compile_seconds=1
        )
        returned_s = time.perf_counter() - t0
        slow_done = slow.done()
        after_slow = compile_pool_stats()["submitted"]
        try:
            slow.result()
            slow_error = ""
        except ts.BudgetError as e:
            slow_error = str(e)
        # a deadline met inside a keyword's step comes out as a schema error at that keyword
        # (or a fallback): past the inline limit nothing of the first try is kept. Limits swept
        # over the compile's length, each schema new (nothing kept from the one before).
        def nested(i):
            return json.dumps({"type": "object", "patternProperties": {
                "^a": {"type": "integer", "multipleOf": 10, "minimum": i,
                       "not": {"multipleOf": 20}},
                "b$": {"type": "number", "multipleOf": 2.5, "minimum": 15,
                       "not": {"multipleOf": 7}}},
                "allOf": [{"anyOf": [{"not": {"patternProperties": {
                    "^c": {"not": {"multipleOf": 30}}}}}, {"maxProperties": 1}]}]})
        swept, sweep_errors, i = 0, [], 0
        while 1e-5 * 1.2 ** (i // 3) < 0.05:
            p = ts.Grammar.compile_pending(
                "json_schema", nested(i), vocab, inline_seconds=1e-5 * 1.2 ** (i // 3)
            )
            try:
                p.result()
            except ts.TokensieveError as e:
                sweep_errors.append(str(e)[:200])
            swept, i = swept + 1, i + 1
        tiny = ts.Grammar.compile_pending("json_schema", nested(-1), vocab, inline_seconds=1e-6)
        tiny_same = masks_of(tiny.result(), b'{"a1": 30}') == masks_of(
            ts.Grammar.from_json_schema(nested(-1), vocab), b'{"a1": 30}')
        errors = {}
        for kind, src, kw in (("regex", "[0-9", {}),
                              ("regex", "[ab]{1,200}[ab]{1,200}", {"max_nfa_bytes": 100})):
            p = ts.Grammar.compile_pending(kind, src, vocab, inline_seconds=0.5, **kw)
            done = p.done()
            try:
                p.result()
                errors[src] = [done, ""]
            except ts.TokensieveError as e:
                errors[src] = [done, type(e).__name__]
        bad = []
        for value in (-1.0, float("nan"), 61.0):
            try:
                ts.Grammar.compile_pending("regex", "a", vocab, inline_seconds=value)
            except ValueError as e:
                bad.append(str(e))
        print(json.dumps({"quick_done": quick_done, "quick_submitted": after_quick - before,
                          "threaded_submitted": after_threaded - after_quick, "same": same,
                          "returned_s": returned_s, "slow_done": slow_done,
                          "slow_submitted": after_slow - after_threaded, "slow_error": slow_error,
                          "errors": errors, "bad": bad,
                          "tiny_same": tiny_same, "swept": swept,
                          "sweep_errors": sweep_errors}))
        """,
        "1",
    )
    assert r["quick_done"] is True and r["quick_submitted"] == 0, r
    assert r["threaded_submitted"] == 1 and r["same"] is True, r
    # back soon after the inline limit (the deadline is checked between steps of the compile)
    assert r["returned_s"] < 0.5 and r["slow_done"] is False and r["slow_submitted"] == 1, r
    assert "max_compile_seconds=1" in r["slow_error"], r
    assert r["errors"]["[0-9"] == [True, "RegexError"], r
    assert r["errors"]["[ab]{1,200}[ab]{1,200}"] == [True, "BudgetError"], r
    assert len(r["bad"]) == 3 and all("inline_seconds" in e for e in r["bad"]), r
    assert r["tiny_same"] is True and r["swept"] > 100 and r["sweep_errors"] == [], r


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity (Linux)")
def test_an_inline_compile_counts_its_threads_cpu_time_not_its_wait_for_a_core() -> None:
    """``inline_seconds`` is the calling thread's CPU time (with a wall-clock cap of ten times
    that): on a core shared with five busy processes, a compile that needs well under the limit
    in CPU but more than the limit in wall-clock time still comes back done, with nothing
    handed to the compile threads; one that needs more CPU than the limit is stopped and handed
    over, soon after its CPU time ran out."""
    r = run_child(
        """
        import os, subprocess
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        spin = f"import os; os.sched_setaffinity(0, {{{cpu}}})\\nwhile True: pass"
        long_enum, other_enum = enum_schema(7, 12000), enum_schema(8, 12000)
        busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(5)]
        try:
            time.sleep(0.3)  # the spinners are running
            before = compile_pool_stats()["submitted"]
            t0, c0 = time.perf_counter(), time.thread_time()
            p = ts.Grammar.compile_pending("json_schema", long_enum, vocab, inline_seconds=0.08)
            wall, used, done = time.perf_counter() - t0, time.thread_time() - c0, p.done()
            submitted = compile_pool_stats()["submitted"] - before
            t0 = time.perf_counter()
            q = ts.Grammar.compile_pending("json_schema", other_enum, vocab, inline_seconds=0.003)
            short_wall, short_done = time.perf_counter() - t0, q.done()
            short_submitted = compile_pool_stats()["submitted"] - before - submitted
            q.result()
        finally:
            for b in busy:
                b.kill()
        print(json.dumps({"wall": wall, "used": used, "done": done, "submitted": submitted,
                          "short_wall": short_wall, "short_done": short_done,
                          "short_submitted": short_submitted}))
        """,
        "1",
    )
    # the setup holds: the compile needed well under the limit in CPU, more in wall-clock time
    assert r["used"] < 0.06 and r["wall"] > 0.08, r
    assert r["done"] is True and r["submitted"] == 0, r
    assert r["short_done"] is False and r["short_submitted"] == 1, r
    assert r["short_wall"] < 0.03 + 0.5, r  # the cap: ten times 3 ms, and a scheduler's slack
