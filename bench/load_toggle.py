"""A background load switched on and off, to run the suite (or a budget) under the drift a shared
CI box shows: ``--workers`` busy processes for ``--on`` seconds, then none for ``--off``, until
``--duration`` is up (it always stops by itself). Each switch is printed with its time, so a
failure's timestamps can be held against it.

    python bench/load_toggle.py --on 60 --off 60 --duration 2400 &
    python -m pytest tests -p randomly
"""

from __future__ import annotations

import argparse
import multiprocessing
import time


def _spin(until: float) -> None:
    x = 0
    while time.monotonic() < until:
        for _ in range(100_000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1, help="busy processes while on")
    parser.add_argument("--on", type=float, default=60.0, help="seconds loaded")
    parser.add_argument("--off", type=float, default=60.0, help="seconds quiet")
    parser.add_argument("--duration", type=float, default=1800.0, help="seconds in all")
    args = parser.parse_args()
    end = time.monotonic() + args.duration
    switches = 0
    while time.monotonic() < end:
        until = min(end, time.monotonic() + args.on)
        print(f"{time.strftime('%H:%M:%S')} load on ({args.workers} busy)", flush=True)
        procs = [multiprocessing.Process(target=_spin, args=(until,)) for _ in range(args.workers)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        print(f"{time.strftime('%H:%M:%S')} load off", flush=True)
        time.sleep(max(0.0, min(end - time.monotonic(), args.off)))
        switches += 1
    print(f"headline: {switches} on/off cycles of {args.on:g} s on, {args.off:g} s off")


if __name__ == "__main__":
    main()
