"""Try ZeroMQ handshakes with an experiment's endpoints three ways, and print what each saw.

Run inside a pod of the experiment's namespace (by tests/e2e/test_user_path.py, as the source of a
`python -c`), with the experiment's key file mounted at $SURREAL_CURVE_KEYS:
- `plain`: no CURVE at all (a pod that knows the address);
- `stranger`: CURVE with the experiment's public key as the server key (public keys are not
  secret) but a keypair of its own (a pod that does not hold the secret key);
- `member`: CURVE with the experiment's keypair (what a role does): the control, which shows the
  address is right and the connection is let through, so that a refusal above is CURVE's.

On the sealed paths (`SEALED`: the collectors and the parameter server's service, whose sockets
are plain and whose messages are sealed, `comm.seal`) the three modes are about messages, not
handshakes: every handshake succeeds there, and at `ps-serve` each mode also sends a fetch,
unsealed (`plain`), sealed with another experiment's key (`stranger`) or with the experiment's
(`member`), and records what kind of answer came (`ANSWER:params`, `ANSWER:none`, `NO-ANSWER`).

Arguments: `endpoint=address` (`ps-serve=tcp://...`): the endpoint's name picks the socket type
a role connects to it with (ZeroMQ refuses a handshake between socket types that do not pair, a
PUSH with a ROUTER, say, whatever the keys). Prints one JSON object: {address: {mode: [socket
monitor events, in order]}}. A handshake that succeeded shows HANDSHAKE_SUCCEEDED; one refused
does not, though CONNECTED (TCP) does.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import zmq
from zmq.utils.monitor import recv_monitor_message

MODES = ("plain", "stranger", "member")
WINDOW_SECONDS = 5.0
"""How long a handshake may take before it counts as not succeeded (it takes milliseconds)."""
FAILED = {zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
          zmq.EVENT_HANDSHAKE_FAILED_AUTH}  # fmt: skip
CONNECTS_WITH = {"ps-serve": zmq.DEALER, "replay-sampler": zmq.DEALER, "parameter-publish": zmq.SUB}
"""The socket type that pairs with each endpoint's server; PUSH for the rest (collectors, metrics)."""
SEALED = ("ps-serve", "replay-collector")
"""Endpoints (name prefixes) of the sealed paths: plain sockets, sealed messages."""


def sealed(name: str) -> bool:
    return name.startswith(SEALED)


NAMES = {
    value: name[len("EVENT_") :]
    for name, value in vars(zmq).items()
    if name.startswith("EVENT_") and isinstance(value, int) and name != "EVENT_ALL"
}


def keys(path: str) -> tuple[bytes, bytes]:
    doc = json.loads(Path(path).read_text())
    return doc["public"].encode(), doc["secret"].encode()


def attempt(ctx: zmq.Context[zmq.Socket[bytes]], target: str, mode: str, public: bytes,
            secret: bytes) -> list[str]:  # fmt: skip
    name, addr = target.split("=", 1)
    sock = ctx.socket(CONNECTS_WITH.get(name, zmq.PUSH))
    sock.setsockopt(zmq.LINGER, 0)
    if sealed(name):
        pass  # a plain socket: the seal is the messages'
    elif mode == "stranger":
        own_public, own_secret = zmq.curve_keypair()
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = (
            public, own_public, own_secret
        )  # fmt: skip
    elif mode == "member":
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = public, public, secret
    monitor = sock.get_monitor_socket(zmq.EVENT_ALL)
    sock.connect(addr)
    seen: list[str] = []
    deadline = time.monotonic() + WINDOW_SECONDS
    while time.monotonic() < deadline:
        if not monitor.poll(100):
            continue
        event = recv_monitor_message(monitor)["event"]
        seen.append(NAMES.get(event, str(event)))
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED or event in FAILED:
            break
    sock.disable_monitor()
    monitor.close(0)
    if name == "ps-serve" and "HANDSHAKE_SUCCEEDED" in seen:
        seen.append(fetch(sock, mode, public, secret))
    sock.close(0)
    return seen


def fetch(sock: zmq.Socket[bytes], mode: str, public: bytes, secret: bytes) -> str:
    """Ask the parameter server for parameters as `mode` would; the kind of answer."""
    from surreal_kube.comm import curve, seal, wire

    keys = {"plain": None, "stranger": curve.generate(), "member": curve.CurveKeys(public, secret)}
    curve.install(keys[mode])
    try:
        sock.send_multipart([b"", *seal.seal(wire.encode(wire.FETCH, {"hash": None}))])
        if not sock.poll(int(WINDOW_SECONDS * 1000)):
            return "NO-ANSWER"
        _, *answer = sock.recv_multipart()
        curve.install(keys["member"])  # the probe reads the answer as a member would
        try:
            return "ANSWER:" + wire.decode(seal.Opener(fresh=False).open(answer)).kind
        except wire.WireError:
            return "ANSWER:" + wire.decode(answer).kind  # a refusal is not sealed
    finally:
        curve.install(None)


def main(targets: list[str]) -> dict[str, dict[str, list[str]]]:
    public, secret = keys(os.environ["SURREAL_CURVE_KEYS"])
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        return {t: {m: attempt(ctx, t, m, public, secret) for m in MODES} for t in targets}
    finally:
        ctx.term()


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])), flush=True)
