#!/usr/bin/env python3
"""Every page under docs/ is listed in docs/README.md's index (a link to it), so a new page cannot
go unfound. Pictures (docs/images/) are shown by the pages that use them and are not listed.

Usage: check_docs_index.py DOCS_DIR
"""
import os
import re
import sys

docs = sys.argv[1]
index = open(os.path.join(docs, "README.md"), encoding="utf-8").read()
linked = {os.path.normpath(m) for m in re.findall(r"\]\(([^)#\s]+)\)", index)}
missing = []
for root, _, files in os.walk(docs):
    for f in files:
        rel = os.path.relpath(os.path.join(root, f), docs)
        if rel == "README.md" or rel.startswith("images" + os.sep):
            continue
        if rel not in linked:
            missing.append(rel)
for rel in sorted(missing):
    print(f"docs/README.md does not list docs/{rel}: add a row for it")
print(f"{len(linked)} links in docs/README.md; {len(missing)} pages under docs/ not listed")
sys.exit(1 if missing else 0)
