"""Prints the slowest tests of a ctest run from its JUnit report (ctest --output-junit FILE), slowest first,
with the run's total: what scripts/test.sh shows at the end of every run, so a test that grew is seen.

    python3 scripts/slowest_tests.py REPORT.xml [COUNT]
"""
import sys
import xml.etree.ElementTree as ET


def main():
    report, count = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10
    cases = [(float(c.get("time", 0)), c.get("name"), c.find("failure") is not None or c.get("status") == "fail")
             for c in ET.parse(report).getroot().iter("testcase")]
    cases.sort(reverse=True)
    total = sum(t for t, _, _ in cases)
    print(f"--- the {min(count, len(cases))} slowest of {len(cases)} tests ({total / 60:.1f} min of test time in all) ---")
    for seconds, name, failed in cases[:count]:
        print(f"{seconds:8.1f} s  {name}{'  (failed)' if failed else ''}")


if __name__ == "__main__":
    main()
