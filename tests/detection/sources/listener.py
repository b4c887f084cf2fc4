"""A loopback HTTP server standing in for Loki: it answers every GET with an empty result (or
a redirect) and keeps the Authorization header of each request."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EMPTY_ANSWER = {"status": "success", "data": {"resultType": "streams", "result": []}}


class Listener:
    """An HTTP server on 127.0.0.1 that answers every GET as an empty Loki and keeps the
    Authorization header of each request."""

    def __init__(self) -> None:
        self.authorizations: list[str | None] = []
        self.redirect_to = ""
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                listener.authorizations.append(self.headers.get("Authorization"))
                if listener.redirect_to:
                    self.send_response(302)
                    self.send_header("Location", listener.redirect_to + self.path)
                    self.end_headers()
                    return
                body = json.dumps(EMPTY_ANSWER).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"


def serving() -> Iterator[Listener]:
    listener = Listener()
    thread = threading.Thread(target=listener.server.serve_forever, daemon=True)
    thread.start()
    yield listener
    listener.server.shutdown()
    listener.server.server_close()
