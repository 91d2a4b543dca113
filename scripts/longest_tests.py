"""The longest tests of a junit file, longest first, one node id a line: tests/gpu_longest.txt, which the GPU
tier's `--dist worksteal` deals out one to each worker's head (tests/conftest.py).
    python3 scripts/longest_tests.py JUNIT.xml [COUNT] > tests/gpu_longest.txt"""

import sys
import xml.etree.ElementTree as ET


def longest(junit: str, count: int) -> list[str]:
    cases = ET.parse(junit).getroot().iter("testcase")
    timed = [(float(c.get("time", 0)), c.get("classname").replace(".", "/") + ".py::" + c.get("name")) for c in cases]
    return [nodeid for _, nodeid in sorted(timed, reverse=True)[:count]]


if __name__ == "__main__":
    print("\n".join(longest(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 24)))
