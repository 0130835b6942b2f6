"""Checks that the Grafana dashboard only asks Prometheus for series that exist.

Usage: check_dashboard.py DASHBOARD.json SCRAPE.txt
       check_dashboard.py --self-test [DASHBOARD.json]

DASHBOARD.json must be a Grafana dashboard whose panels (other than rows and text) all have
PromQL targets. Every metric named in a PromQL expression (panel targets, annotations, template
variable queries: identifiers starting with shardtrain_ or DCGM_) must appear in SCRAPE.txt, a
Prometheus text-format scrape of `shardtrain train --metrics-port`, or be one of the six DCGM
metrics below (dcgm-exporter is not running here); each of those six must be used. Prints what is
wrong and exits 1, else prints a one-line summary and exits 0.

--self-test proves the checker fails where it should: on a metric the scrape lacks, on a DCGM
metric left out, and on a panel without a query (on DASHBOARD.json too, when given).
"""
import copy
import json
import re
import sys

DCGM = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")
IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
NO_QUERY_PANELS = ("row", "text", "dashlist", "news")


def panels_of(dash):
    """Every panel, including those inside collapsed rows."""
    out = []
    for p in dash.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []) if p.get("type") == "row" else [])
    return out


def expressions(dash):
    """(where, PromQL) for panel targets, annotations and query variables."""
    exprs = []
    for p in panels_of(dash):
        for t in p.get("targets", []):
            if t.get("expr"):
                exprs.append((f"panel '{p.get('title')}' {t.get('refId', '')}", t["expr"]))
    for a in dash.get("annotations", {}).get("list", []):
        if a.get("expr"):
            exprs.append((f"annotation '{a.get('name')}'", a["expr"]))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query", "") if isinstance(q, dict) else q or ""
            exprs.append((f"variable ${v.get('name')}", q or v.get("definition", "")))
    return exprs


def metric_names(expr):
    return {t for t in IDENT.findall(expr) if t.startswith(("shardtrain_", "DCGM_"))}


def scrape_names(text):
    """Metric names of a text-format scrape: the token before '{' or a space on sample lines."""
    names = set()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def problems(dash, scrape_text):
    """What is wrong with the dashboard against a scrape, as a list of lines (empty: all good)."""
    out = []
    if not isinstance(dash, dict) or not isinstance(dash.get("panels"), list) or not dash["panels"]:
        return ["the dashboard has no \"panels\" list"]
    for p in panels_of(dash):
        if p.get("type") not in NO_QUERY_PANELS and not any(t.get("expr") for t in p.get("targets", [])):
            out.append(f"panel '{p.get('title')}' ({p.get('type')}) has no target with a PromQL expr")
    exprs = expressions(dash)
    if not any(where.startswith("panel") for where, _ in exprs):
        out.append("no panel has a PromQL target")
    have = scrape_names(scrape_text)
    used = set()
    for where, expr in exprs:
        names = metric_names(expr)
        used |= names
        for name in sorted(names - have - set(DCGM)):
            out.append(f"{where}: {name} is not in the scrape (nor one of the six DCGM metrics): {expr}")
    for name in DCGM:
        if name not in used:
            out.append(f"{name} is not used by any panel")
    return out


def check(dash_path, scrape_path):
    try:
        with open(dash_path) as f:
            dash = json.load(f)
    except (OSError, ValueError) as e:
        return [f"{dash_path}: cannot read it as JSON: {e}"], 0
    with open(scrape_path) as f:
        scrape = f.read()
    if not scrape_names(scrape):
        return [f"{scrape_path}: no samples; pass a scrape of shardtrain's /metrics"], 0
    return problems(dash, scrape), len(expressions(dash))


def self_test(dash_path=None):
    scrape = ('# TYPE shardtrain_loss gauge\nshardtrain_loss{job="j",host="h",rank="0"} 2.5\n'
              'shardtrain_collectives_total{job="j",group="world",op="all_gather"} 3\n')
    good = {"panels": [
        {"type": "row", "title": "r", "panels": []},
        {"type": "timeseries", "title": "loss", "targets": [{"refId": "A", "expr": 'avg(shardtrain_loss{job=~"$job"})'}]},
        {"type": "timeseries", "title": "c", "targets": [
            {"refId": "A", "expr": "sum by (op) (rate(shardtrain_collectives_total[$__rate_interval]))"}]},
        {"type": "timeseries", "title": "gpu", "targets": [
            {"refId": chr(65 + i), "expr": f'max by (Hostname) ({m}{{Hostname=~"$host"}})'} for i, m in enumerate(DCGM)]}]}
    cases = []
    assert problems(good, scrape) == [], problems(good, scrape)
    bogus = copy.deepcopy(good)
    bogus["panels"][1]["targets"].append({"refId": "B", "expr": "shardtrain_bogus_metric + DCGM_FI_DEV_FAKE"})
    cases.append(("a bogus metric", bogus, scrape, ["shardtrain_bogus_metric", "DCGM_FI_DEV_FAKE"]))
    no_xid = copy.deepcopy(good)
    no_xid["panels"][3]["targets"] = [t for t in no_xid["panels"][3]["targets"] if "XID" not in t["expr"]]
    cases.append(("a DCGM metric left out", no_xid, scrape, ["DCGM_FI_DEV_XID_ERRORS is not used"]))
    empty = copy.deepcopy(good)
    empty["panels"][1]["targets"] = []
    cases.append(("a panel without a query", empty, scrape, ["panel 'loss' (timeseries) has no target"]))
    cases.append(("a scrape without that series", good, scrape.replace("shardtrain_loss", "shardtrain_lost"),
                  ["shardtrain_loss is not in the scrape"]))
    cases.append(("no panels", {"title": "x"}, scrape, ["no \"panels\""]))
    if dash_path:
        with open(dash_path) as f:
            real = json.load(f)
        everything = "\n".join(f"{n} 1" for _, e in expressions(real) for n in metric_names(e))
        assert problems(real, everything) == [], problems(real, everything)
        broken = copy.deepcopy(real)
        first = next(p for p in panels_of(broken) if p.get("targets"))
        first["targets"].append({"refId": "Z", "expr": "rate(shardtrain_bogus_metric_total[5m])"})
        cases.append((f"{dash_path} with a bogus target", broken, everything, ["shardtrain_bogus_metric_total"]))
    for name, dash, scr, wanted in cases:
        found = problems(dash, scr)
        missing = [w for w in wanted if not any(w in line for line in found)]
        if missing:
            sys.exit(f"self-test failed: {name}: expected a problem mentioning {missing}, got {found}")
        print(f"self-test: {name}: fails as it should ({found[0]})")
    print(f"self-test passed: {len(cases)} broken dashboards rejected, the good one accepted")


def main():
    args = sys.argv[1:]
    if args[:1] == ["--self-test"] and len(args) <= 2:
        return self_test(args[1] if len(args) == 2 else None)
    if len(args) != 2:
        sys.exit(__doc__)
    found, count = check(*args)
    if found:
        print(f"{args[0]}: {len(found)} problem(s) against {args[1]}:", *found, sep="\n  ")
        sys.exit(1)
    print(f"{args[0]}: {count} PromQL expressions, every metric is in {args[1]} or one of the six DCGM metrics")


if __name__ == "__main__":
    main()
