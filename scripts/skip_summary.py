#!/usr/bin/env python3
"""The tests a ctest run skipped or did not run, counted by reason, from ctest's JUnit file
(ctest --output-junit FILE). One line per reason: how many tests, the reason, the first names.
A reason is the message of gtest's GTEST_SKIP (the line after "file:line: Skipped"), a script's
"SKIP: ..." line, or ctest's own (a required fixture that failed); prints nothing when none.

usage: skip_summary.py JUNIT.xml
"""
import collections
import sys
import xml.etree.ElementTree as ET


def reason(case):
    out = case.findtext("system-out") or ""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.endswith(": Skipped") and i + 1 < len(lines) and not lines[i + 1].startswith("[  SKIPPED ]"):
            return lines[i + 1]
    for line in reversed(lines):
        if line.upper().startswith("SKIP"):
            return line.split(":", 1)[-1].strip() if ":" in line else line
    skipped = case.find("skipped")
    message = skipped.get("message", "") if skipped is not None else ""
    return message or (lines[-1] if lines else "no reason given")


def main(path):
    by_reason = collections.defaultdict(list)
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("skipped") is not None or case.get("status") in ("skipped", "notrun", "disabled"):
            by_reason[reason(case)].append(case.get("name"))
    if not by_reason:
        return
    print(f"{sum(map(len, by_reason.values()))} tests skipped or not run:")
    for why, names in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        print(f"  {len(names):4d}  {why}  ({shown})")


if __name__ == "__main__":
    main(sys.argv[1])
