"""Renders a Helm chart with Helm's own engine (helm-python-sdk: Helm's Go SDK behind a C ABI).

    python3 helm_render.py CHART_DIR RELEASE NAMESPACE VALUES_JSON

Prints one JSON object: {"lint_errors": [...], "manifests": {template path: rendered text},
"crds": {file name: text}}. Exit status 3 when helm_python is not importable, so callers can
tell "no renderer here" from a rendering error (status 1 with the error on stderr).
"""

import json
import os
import sys

try:
    import helm_python as helm
except ImportError as e:  # the SDK is installed by .ci/run; elsewhere it is optional
    print(f"helm_python not importable: {e}", file=sys.stderr)
    sys.exit(3)


def main():
    chart_dir, release, namespace, values = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    lint = helm.lint(chart_dir)
    with helm.Chart.load(chart_dir) as chart:
        manifests = chart.render(json.loads(values), name=release, namespace=namespace)
    crds_dir = os.path.join(chart_dir, "crds")
    crds = {}
    if os.path.isdir(crds_dir):
        for name in sorted(os.listdir(crds_dir)):
            with open(os.path.join(crds_dir, name), encoding="utf-8") as f:
                crds[name] = f.read()
    json.dump(
        {"lint_errors": lint.get("errors", []), "manifests": manifests, "crds": crds},
        sys.stdout,
    )


if __name__ == "__main__":
    main()
