#!/usr/bin/env python3
"""configmap-propagation: a kmeta (Metacontroller-compatible) hook written with only the standard library.

A cluster-scoped ConfigMapPropagation names a source ConfigMap and a list of target namespaces.
- The customize hook asks kmeta for the source ConfigMap as a *related* object.
- The sync hook returns one copy of it per target namespace as *children*, and reports status.

Run:  python3 hook.py --port 8080      (serves POST /customize and POST /sync)
"""
import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def customize(request):
    spec = request["parent"].get("spec", {})
    return {
        "relatedResources": [
            {
                "apiVersion": "v1",
                "resource": "configmaps",
                "namespace": spec.get("sourceNamespace", "default"),
                "names": [spec["sourceName"]],
            }
        ]
    }


def sync(request):
    parent = request["parent"]
    spec = parent.get("spec", {})
    source_ns = spec.get("sourceNamespace", "default")
    source_name = spec["sourceName"]
    related = request.get("related", {}).get("ConfigMap.v1", {})
    # v1 keys namespaced related objects of a cluster-scoped parent as "namespace/name"
    source = related.get(f"{source_ns}/{source_name}") or related.get(source_name)

    targets = sorted(set(spec.get("targetNamespaces", [])))
    children = []
    if source is not None:
        for ns in targets:
            children.append(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": source_name,
                        "namespace": ns,
                        "labels": {"configmap-propagation.example.com/parent": parent["metadata"]["name"]},
                    },
                    "data": source.get("data", {}),
                }
            )

    observed = request.get("children", {}).get("ConfigMap.v1", {})
    copied = sum(1 for key in observed if key.split("/", 1)[0] in targets)
    status = {
        "sourceFound": source is not None,
        "expectedCopies": len(targets),
        "actualCopies": copied,
    }
    return {"status": status, "children": children}


HANDLERS = {"/customize": customize, "/sync": sync}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (http.server naming)
        handler = HANDLERS.get(self.path)
        if handler is None:
            self.send_error(404, "unknown hook path")
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(length))
            body = json.dumps(handler(request)).encode()
        except (KeyError, ValueError, TypeError) as err:
            body = json.dumps({"error": f"bad request: {err!r}"}).encode()
            self.send_response(400)
        else:
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        sys.stderr.write("hook: " + (fmt % args) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (0 picks a free one)")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    try:
        server = ThreadingHTTPServer((args.host, args.port), Handler)
    except OSError as err:
        # one line, no traceback: the usual cause is another hook already on the port
        sys.exit(f"hook: cannot listen on {args.host}:{args.port}: {err.strerror}")
    # The first line on stdout is the bound port, so a test can start the hook on port 0.
    print(f"listening on {server.server_address[0]}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
