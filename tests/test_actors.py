"""acquire_politely: a lock shared by Python threads, taken without a lock
convoy (see dsh_actors/actors.py)."""

from __future__ import annotations

import threading

from dsh_actors.actors import acquire_politely

GUARD = 10.0


def test_it_waits_for_a_holder_that_keeps_the_lock_and_then_takes_it() -> None:
    lock = threading.Lock()
    trying = threading.Event()
    acquired = threading.Event()

    def waiter() -> None:
        trying.set()
        acquire_politely(lock)  # spins a little, then blocks
        acquired.set()
        lock.release()

    lock.acquire()
    thread = threading.Thread(target=waiter)
    thread.start()
    try:
        assert trying.wait(GUARD)
        assert not acquired.is_set()  # the lock is held: it cannot have it
    finally:
        lock.release()
    assert acquired.wait(GUARD)
    thread.join(GUARD)
    assert not thread.is_alive() and not lock.locked()


def test_it_excludes_under_contention() -> None:
    lock = threading.Lock()
    start = threading.Barrier(4)
    inside = 0
    worst = 0
    counter = 0

    def worker() -> None:
        nonlocal inside, worst, counter
        start.wait(GUARD)
        for _ in range(2000):
            acquire_politely(lock)
            try:
                inside += 1
                worst = max(worst, inside)
                counter += 1
                inside -= 1
            finally:
                lock.release()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(GUARD)
    assert counter == 8000 and worst == 1 and not lock.locked()
