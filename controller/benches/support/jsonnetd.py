"""A jsonnetd stand-in for the jsonnet_hook bench: serves one Jsonnet file as a webhook at
/hook, evaluating it per request with the Python package `jsonnet` (C++ Jsonnet) and the
request body as top-level code argument `request`, as Metacontroller's jsonnetd does. Prints
its port on stdout, then serves until killed.

argv: the program file. Exit code 3 when the `jsonnet` package is not installed.
"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    import _jsonnet
except ImportError:
    sys.exit(3)

PROGRAM = open(sys.argv[1]).read()


class Hook(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        try:
            out = _jsonnet.evaluate_snippet(
                "hook.jsonnet", PROGRAM, tla_codes={"request": body.decode()}
            ).encode()
            code = 200
        except RuntimeError as e:
            out, code = str(e).encode(), 500
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
print(server.server_address[1], flush=True)
server.serve_forever()
