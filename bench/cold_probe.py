"""How much slower Python runs after an idle moment: the one-reader wake's real adversary.

Times one small piece of request work (three Starlette ``Response`` objects and their headers
walked) after the bench's 50 ms idle, right after a ``pwritev(..., RWF_DSYNC)`` of 120 B into
a preallocated file (what the WAL does), once more at once (warm), and after a 0.3 ms sleep
instead of the sync. The ``lp1`` row parks a long-poll, idles 50 ms, then times one append's
whole path: every function on it runs in the first of these states.

    python bench/cold_probe.py [--rounds 60]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from starlette.responses import Response


def _work() -> float:
    started = time.perf_counter()
    for index in range(3):
        token = f"{index:016d}_0000000000000000"
        headers = {"Content-Type": "text/plain", "Stream-Next-Offset": token, "ETag": f'"1:{index}"', "Vary": "Accept"}
        response = Response(b"x" * 100, status_code=200, headers=headers)
        b"".join(name + value for name, value in response.raw_headers)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    seen: dict[str, list[float]] = {"after 50 ms idle": [], "right after the sync": [], "warm": [], "after 0.3 ms": []}
    with tempfile.TemporaryDirectory(prefix="ds-cold-") as work:
        fd = os.open(os.path.join(work, "log"), os.O_RDWR | os.O_CREAT)
        os.posix_fallocate(fd, 0, 8 << 20)
        end = 0
        for _ in range(args.rounds):
            time.sleep(0.05)
            seen["after 50 ms idle"].append(_work())
            end += os.pwritev(fd, [b"y" * 120], end, os.RWF_DSYNC)
            seen["right after the sync"].append(_work())
            seen["warm"].append(_work())
            time.sleep(0.0003)
            seen["after 0.3 ms"].append(_work())
        os.close(fd)
    print(" | ".join(f"{state}: {1e6 * statistics.median(values):.1f} µs" for state, values in seen.items()))


if __name__ == "__main__":
    main()
