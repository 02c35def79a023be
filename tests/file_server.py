"""A local HTTP server of in-memory files for the download tests (no network here): `files` maps a
name to its bytes, served under `url` (http://127.0.0.1:<port>/mirror/); `requests` lists the
paths asked for, so a test can see that a cached file was not fetched again."""
import http.server
import threading


class FileServer:
    def __init__(self):
        self.files, self.requests = {}, []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append(self.path)
                body = outer.files.get(self.path.split("?")[0].rsplit("/", 1)[-1])
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # keep pytest output clean
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/mirror/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
