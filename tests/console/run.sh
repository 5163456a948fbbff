#!/usr/bin/env bash
# The console's tests, as ctest runs them (tests/CMakeLists.txt):
#
#   tests/console/run.sh lint               # eslint over console/www and these tests
#   tests/console/run.sh unit               # its pure modules, and its client, in node
#   tests/console/run.sh browser <worker>   # its pages in headless Chromium against a real fleet
#
# scripts/test installs chromium (apt) and these npm packages (npm install here); a missing
# one fails the run, never skips it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ ! -d "$here/node_modules/puppeteer-core" ] || [ ! -d "$here/node_modules/eslint" ]; then
    echo "the console tests' npm packages are not installed in $here: scripts/test installs them" >&2
    exit 1
fi
case "${1:-}" in
lint)
    cd "$root"
    exec "$here/node_modules/.bin/eslint" --max-warnings 0 -c "$here/eslint.config.js" console/www tests/console
    ;;
unit)
    exec node --test "$here/model.test.mjs" "$here/client.test.mjs"
    ;;
browser)
    export WUHU_WORKER=${2:?the wuhu-worker binary}
    export WUHU_CHROMIUM=${WUHU_CHROMIUM:-$(command -v chromium || true)}
    if [ -z "$WUHU_CHROMIUM" ]; then
        echo "chromium is not installed: scripts/test installs it (apt-get install chromium)" >&2
        exit 1
    fi
    command -v nats-server >/dev/null || { echo "nats-server is not installed" >&2; exit 1; }
    exec node --test --test-concurrency=1 "$here/browser.test.mjs" "$here/tenants.test.mjs"
    ;;
*)
    echo "usage: $0 lint | unit | browser <wuhu-worker>" >&2
    exit 2
    ;;
esac
