"""A TCP relay on 127.0.0.1, as a machine on the path between a client and a service would be:
subclasses watch or alter the bytes of each connection through on_chunk."""
import socket
import threading


class TcpRelay:
    """Listens on 127.0.0.1 (``port``) and forwards every connection to 127.0.0.1:``target_port``,
    each chunk through on_chunk. ``upstream`` holds each connection's socket toward the target, in
    the order the connections came, for a test to inject bytes of its own."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.upstream = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closing = False
        self._sockets = []
        threading.Thread(target=self._accept, daemon=True).start()

    def on_connection(self, index: int) -> None:
        """Called for connection ``index`` before any of its bytes pass."""

    def on_chunk(self, index: int, from_connector: bool, chunk: bytearray, seen: int) -> bytearray:
        """Returns what to forward of ``chunk``, which follows the first ``seen`` bytes that went
        this way on connection ``index``."""
        return chunk

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
            index = len(self.upstream)
            self.upstream.append(up)
            self._sockets += [down, up]
            self.on_connection(index)
            threading.Thread(target=self._pump, args=(down, up, index, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, index, False), daemon=True).start()

    def _pump(self, src, dst, index, from_connector):
        seen = 0
        try:
            while True:
                chunk = bytearray(src.recv(65536))
                if not chunk:
                    break
                out = self.on_chunk(index, from_connector, chunk, seen)
                seen += len(chunk)
                dst.sendall(out)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
