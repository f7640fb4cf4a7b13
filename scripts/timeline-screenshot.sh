#!/usr/bin/env bash
# The screenshot of docs/cli.md ("A timeline"): the timeline of
# scenarios/examples/pfc-incast.toml opened in speedscope, rendered by
# headless Chromium into docs/img/timeline-speedscope.png.
#
#   bash scripts/timeline-screenshot.sh           # fetch if needed, then shoot
#   bash scripts/timeline-screenshot.sh --fetch   # only fetch speedscope
#
# Needs node/npm (speedscope comes from the npm registry, pinned, into
# target/speedscope) and chromium (apt-get install chromium).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=1.25.0
DIR=target/speedscope
APP=$DIR/package/dist/release

if [ ! -f "$APP/index.html" ]; then
    mkdir -p "$DIR"
    (cd "$DIR" && npm pack --silent "speedscope@$VERSION" >/dev/null \
        && tar xzf "speedscope-$VERSION.tgz")
fi
echo "speedscope $VERSION in $APP"
[ "${1:-}" = "--fetch" ] && exit 0

out=target/timeline-shot
mkdir -p "$out"
cargo run --quiet --locked -- run scenarios/examples/pfc-incast.toml \
    --timeline "$out/pfc-incast.json" >/dev/null
# As speedscope's own command line hands it a file: a script that loads
# it, named in the page's address.
node -e '
const fs = require("fs");
const b64 = fs.readFileSync(process.argv[1]).toString("base64");
fs.writeFileSync(process.argv[2],
  "speedscope.loadFileFromBase64(\"pfc-incast.json\", " + JSON.stringify(b64) + ")");
' "$out/pfc-incast.json" "$out/load.js"
# Software WebGL (SwiftShader): speedscope draws its flame chart with it.
chromium --headless --no-sandbox --disable-dev-shm-usage \
    --enable-unsafe-swiftshader --use-angle=swiftshader \
    --allow-file-access-from-files --timeout=5000 --window-size=1400,700 \
    --screenshot="$PWD/docs/img/timeline-speedscope.png" \
    "file://$PWD/$APP/index.html#localProfilePath=$PWD/$out/load.js" 2>/dev/null
echo "wrote docs/img/timeline-speedscope.png"
