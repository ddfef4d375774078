"""The crd-roles DecoratorController hook (Metacontroller's examples/crd-roles) for the
scenario tests: one ClusterRole `<crd name>-reader` attached to each selected CRD.

Serves on 127.0.0.1 on a free port and prints that port on its first stdout line."""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


def reader_role(crd):
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": crd["metadata"]["name"] + "-reader"},
        "rules": [],
    }


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        body = json.dumps({"attachments": [reader_role(request["object"])]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Hook)
print(server.server_address[1], flush=True)
sys.stdout.close()
server.serve_forever()
