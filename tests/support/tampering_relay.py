"""A TCP relay between two ranks that can flip one byte of a channel after the handshake,
as a machine on the path could (tests/security/test_data_plane_auth.py)."""
import socket
import struct
import threading

# The connector's handshake bytes (native/transport/peer_wire.h): greeting (magic, rank, channel,
# nonce, MAC) then the proof; what follows on the connection is the channel's stream.
_GREETING, _PROOF = 12 + 16 + 32, 32
CONTROL_CHANNEL, DATA_CHANNEL = 1, 2


class TamperingRelay:
    """Listens on 127.0.0.1 and forwards every connection to 127.0.0.1:``target_port``. With
    ``flip_at`` set, the byte ``flip_at`` bytes into the connector's stream on ``channel`` (after
    its handshake) is inverted on its way to the acceptor."""

    def __init__(self, target_port, flip_at=None, channel=DATA_CHANNEL):
        self.target_port, self.flip_at, self.channel = target_port, flip_at, channel
        self.flipped = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closing = False
        self._sockets = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self._closing = True
        for s in [self._listener, *self._sockets]:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self):
        while not self._closing:
            try:
                down, _ = self._listener.accept()
                up = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                return
            self._sockets += [down, up]
            threading.Thread(target=self._pump, args=(down, up, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, False), daemon=True).start()

    def _pump(self, src, dst, from_connector):
        seen = 0
        channel = None
        try:
            while True:
                chunk = bytearray(src.recv(65536))
                if not chunk:
                    break
                if from_connector and channel is None and seen + len(chunk) >= 12:
                    head = bytes(chunk[:12]) if seen == 0 else None
                    channel = struct.unpack(">III", head)[2] if head else -1
                if from_connector and channel == self.channel and self.flip_at is not None:
                    at = _GREETING + _PROOF + self.flip_at - seen
                    if 0 <= at < len(chunk) and not self.flipped.is_set():
                        chunk[at] ^= 0xFF
                        self.flipped.set()
                seen += len(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
