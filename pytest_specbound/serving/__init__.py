"""Stage 2, serving: server lifecycle (launch or attach), the HTTP transport, one backend per
server family, and the per-request records they produce."""
