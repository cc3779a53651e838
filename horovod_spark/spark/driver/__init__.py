"""The driver side every Spark launch shares: the service the tasks and ranks meet at (``service``:
rendezvous, registration, control, failure reports), the ranks' output printed on the driver
(``output``), their results streamed past the JVM (``results``), and the checks made before any
Spark job (``preflight``)."""
