"""The rules ``draftgate dev`` keeps its components by: restart backoff, giving up, waiting."""

from __future__ import annotations

import signal

import pytest

from service.cli.supervisor import (
    ReadyTimeout,
    RestartPolicy,
    default_ready_timeout,
    exit_description,
)


def test_a_dying_component_is_restarted_after_a_doubling_delay_until_its_fifth_death():
    policy = RestartPolicy()

    delays = [policy.delay_after_death("worker", now=float(t)) for t in (0, 2, 5, 10, 19)]

    assert delays == [1.0, 2.0, 4.0, 8.0, None]


def test_deaths_older_than_the_window_are_forgotten():
    policy = RestartPolicy(window_seconds=120)
    for at in (0, 10, 20, 30):
        policy.delay_after_death("worker", now=float(at))

    assert policy.delay_after_death("worker", now=151.0) == 1.0  # all four out of the window
    assert policy.deaths["worker"] == [151.0]


def test_a_component_killed_now_and_then_is_never_given_up():
    policy = RestartPolicy()

    delays = [policy.delay_after_death("worker", now=60.0 * n) for n in range(50)]

    assert None not in delays
    assert max(delays) == 2.0  # at most two deaths ever fall within 120 s


def test_each_component_has_its_own_count_and_the_delay_is_capped():
    policy = RestartPolicy(max_deaths=10, max_delay_seconds=30)
    for at in range(8):
        policy.delay_after_death("api", now=float(at))

    assert policy.delay_after_death("api", now=8.0) == 30.0  # 2**8 s, capped
    assert policy.delay_after_death("beat", now=8.0) == 1.0


@pytest.mark.parametrize(
    ("cpus", "load", "seconds"),
    [
        (2, 0.0, 60.0),  # (0 + 4) / 2 = 2 processes per core: 60 s
        (2, 1.5, 90.0),  # 2.75 per core: 82.5 s, rounded up to 90
        (2, 6.0, 150.0),  # the shared machine under load
        (1, 0.0, 120.0),
        (16, 3.0, 60.0),  # never below 60 s
        (2, 100.0, 600.0),  # never above 600 s
        (2, -1.0, 60.0),
        (0, 0.0, 120.0),  # an unknown count counts as one core
    ],
)
def test_the_default_ready_timeout_scales_with_processes_per_core(cpus, load, seconds):
    assert default_ready_timeout(cpus, load) == seconds


def test_the_ready_timeout_says_where_it_came_from():
    assert ReadyTimeout.of(12.5) == ReadyTimeout(12.5, "--ready-timeout")
    default = ReadyTimeout.of(None)
    assert 60 <= default.seconds <= 600
    assert default.basis.startswith("the default for ")
    assert "pass --ready-timeout to change it" in default.basis


def test_exits_are_described_for_people():
    assert exit_description(3) == "exit code 3"
    assert exit_description(-signal.SIGKILL) == "killed by SIGKILL"
    assert exit_description(-200) == "killed by signal 200"
