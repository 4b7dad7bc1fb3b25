#!/usr/bin/env python3
"""mock_openai_server.py — a fake OpenAI-compatible server with known delays,
for checking `moe8 bench serve` by hand. Not used by the build or `make test`.

GET /v1/models lists one model. POST /v1/completions and /v1/chat/completions
stream max_tokens text chunks: the first --ttft-ms after the request was read,
then one every --itl-ms (on an absolute schedule, so sleeps do not drift), then
a finish chunk, a usage chunk (prompt_tokens = words of the prompt) and
data: [DONE]. Chunked HTTP/1.1 with TCP_NODELAY, one thread per connection.

Faults, counted over POST requests 1, 2, 3, ...: --fail-every K answers HTTP 500;
--malformed-every K sends a chunk that is not JSON; --hang-every K never answers;
--no-usage drops the usage chunk; --quirky writes the stream one byte per
chunk with CRLF line ends, `data:` without a space, comments and event: lines.
--log FILE appends one JSON line per POST (arrival time, path, Authorization
header, body).

    python3 tests/data/mock_openai_server.py --port 8399 --ttft-ms 200 --itl-ms 20
"""
import argparse
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOCK = threading.Lock()
COUNT = [0]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *a):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def chunk(self, data):
        b = data.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))

    def event(self, obj):
        data = obj if isinstance(obj, str) else json.dumps(obj)
        if not ARGS.quirky:
            return self.chunk("data: " + data + "\n\n")
        for c in ": keep-alive\r\nevent: message\r\ndata:" + data + "\r\n\r\n":
            self.chunk(c)

    def do_GET(self):
        if self.path != "/v1/models":
            return self.send_json(404, {"error": {"message": "no route " + self.path}})
        self.send_json(200, {"object": "list", "data": [{"id": ARGS.model, "object": "model"}]})

    def do_POST(self):
        t_arrive = time.monotonic()
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        chat = self.path == "/v1/chat/completions"
        if not chat and self.path != "/v1/completions":
            return self.send_json(404, {"error": {"message": "no route " + self.path}})
        with LOCK:
            COUNT[0] += 1
            k = COUNT[0]
        req = json.loads(body)
        if ARGS.log:
            with LOCK, open(ARGS.log, "a") as f:
                f.write(json.dumps({"t": t_arrive, "path": self.path,
                                    "auth": self.headers.get("Authorization"), "body": req}) + "\n")
        if ARGS.api_key and self.headers.get("Authorization") != "Bearer " + ARGS.api_key:
            return self.send_json(401, {"error": {"message": "bad api key"}})
        if ARGS.fail_every and k % ARGS.fail_every == 0:
            return self.send_json(500, {"error": {"message": "injected failure %d" % k}})
        if ARGS.hang_every and k % ARGS.hang_every == 0:
            time.sleep(3600)
            return
        prompt = req["messages"][0]["content"] if chat else req["prompt"]
        n_out = int(req["max_tokens"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        obj = "chat.completion.chunk" if chat else "text_completion"
        if chat:  # the role chunk vLLM sends first: no text, not a token
            self.event({"object": obj, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        for i in range(n_out):
            target = t_arrive + (ARGS.ttft_ms + i * ARGS.itl_ms) / 1e3
            dt = target - time.monotonic()
            if dt > 0:
                time.sleep(dt)
            if ARGS.malformed_every and k % ARGS.malformed_every == 0 and i == n_out // 2:
                self.event("{not json")
                break
            text = " tok%d" % i
            c = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
            self.event({"object": obj, "choices": [c], "usage": None})
        fin = {"index": 0, "finish_reason": "length"}
        fin.update({"delta": {}} if chat else {"text": ""})
        self.event({"object": obj, "choices": [fin], "usage": None})
        if not ARGS.no_usage:
            self.event({"object": obj, "choices": [], "usage": {
                "prompt_tokens": len(prompt.split()), "completion_tokens": n_out,
                "total_tokens": len(prompt.split()) + n_out}})
        self.event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the listen backlog: many connections at once


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8399)
    ap.add_argument("--model", default="mock-model")
    ap.add_argument("--ttft-ms", type=float, default=200.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--api-key")
    ap.add_argument("--fail-every", type=int, default=0)
    ap.add_argument("--malformed-every", type=int, default=0)
    ap.add_argument("--hang-every", type=int, default=0)
    ap.add_argument("--no-usage", action="store_true")
    ap.add_argument("--quirky", action="store_true")
    ap.add_argument("--log")
    ARGS = ap.parse_args()
    srv = Server(("127.0.0.1", ARGS.port), Handler)
    print("mock server on http://127.0.0.1:%d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
