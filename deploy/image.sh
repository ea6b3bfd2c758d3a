#!/usr/bin/env bash
# Builds and inspects the outbox-canary image without a registry: the
# static binary of `make build` on an empty base (deploy/image/Containerfile),
# with podman or docker, whichever runs here.
#
#   deploy/image.sh engine   print the engine command that runs here
#                            (installing Debian's podman and runc where
#                            neither podman nor docker runs)
#   deploy/image.sh build    build bin/outbox-canary and the image $IMAGE
#   deploy/image.sh scan     list what is in $IMAGE: files, user, labels, size
#
# Environment: IMAGE (default localhost/outbox-canary:$VERSION), VERSION and
# REVISION (the Makefile passes its own), CONTAINER_ENGINE (docker or podman,
# to choose). Podman runs with deploy/image/containers.conf (CONTAINERS_CONF):
# runc, cgroupfs, no default ulimits, what these machines allow.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$root/deploy/image/containers.conf}
VERSION=${VERSION:-$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo dev)}
REVISION=${REVISION:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}
IMAGE=${IMAGE:-localhost/outbox-canary:$VERSION}

say() { echo "image: $*" >&2; }

# works ENGINE: the engine can build and run containers here. `docker info`
# fails without a daemon (the docker client is installed here without one).
works() {
	case $1 in
	docker) docker info >/dev/null 2>&1 ;;
	podman) podman info >/dev/null 2>&1 ;;
	*) return 1 ;;
	esac
}

engine() {
	if [ -n "${CONTAINER_ENGINE:-}" ]; then
		works "$CONTAINER_ENGINE" || { say "CONTAINER_ENGINE=$CONTAINER_ENGINE does not run here"; return 1; }
		echo "$CONTAINER_ENGINE"
		return
	fi
	for e in podman docker; do
		if command -v "$e" >/dev/null && works "$e"; then
			echo "$e"
			return
		fi
	done
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		say "neither podman nor docker runs here; install podman and runc (Debian: apt-get install podman runc)"
		return 1
	fi
	say "neither podman nor docker runs here: installing Debian's podman and runc"
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=300 -q update >/dev/null
	apt-get -o DPkg::Lock::Timeout=300 -q install -y --no-install-recommends podman runc >/dev/null
	works podman || { say "podman is installed but does not run: podman info says"; podman info >&2; return 1; }
	echo podman
}

# cabundle prints the path of Debian's CA bundle, installing the
# ca-certificates package when it is missing.
cabundle() {
	local bundle=/etc/ssl/certs/ca-certificates.crt
	if [ ! -s "$bundle" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		say "installing Debian's ca-certificates"
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -q install -y --no-install-recommends ca-certificates >/dev/null
	fi
	[ -s "$bundle" ] || { say "no CA bundle at $bundle (Debian's ca-certificates package)"; return 1; }
	echo "$bundle"
}

build() {
	local e bundle ctx
	e=$(engine)
	bundle=$(cabundle)
	make -C "$root" --no-print-directory build VERSION="$VERSION" REVISION="$REVISION" >&2
	ctx=$(mktemp -d)
	trap 'rm -rf "$ctx"' RETURN
	mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/var/lib" "$ctx/state"
	cp "$root/bin/outbox-canary" "$ctx/rootfs/usr/local/bin/outbox-canary"
	cp "$bundle" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
	# Names for the IDs, as distroless has them: Go's os/user and the
	# status page's "user" need no more. No shell: nologin is a path, not a
	# file in the image.
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ctx/rootfs/etc/passwd"
	printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/rootfs/etc/group"
	cp "$root/deploy/image/Containerfile" "$ctx/Containerfile"
	# The commit's time, not the build's: the same commit builds the same
	# labels (as .goreleaser.yaml's mod_timestamp).
	local created
	created=$(git -C "$root" log -1 --format=%cI 2>/dev/null | xargs -r date -u +%Y-%m-%dT%H:%M:%SZ -d || true)
	created=${created:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}
	say "building $IMAGE with $e"
	"$e" build --quiet -f "$ctx/Containerfile" \
		--build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" --build-arg CREATED="$created" \
		-t "$IMAGE" "$ctx" >/dev/null
	"$e" image inspect --format '{{.Id}} {{.Size}}' "$IMAGE" | while read -r id size; do
		say "$IMAGE: id ${id:0:19}, $((size / 1000)) kB ($((size * 10 / 1000000 / 10)).$((size * 10 / 1000000 % 10)) MB)"
	done
}

# scan lists what is in $IMAGE: its configuration and the files of a
# container created from it and exported, never started (it has no shell
# to start).
scan() {
	local e id files
	e=$(engine)
	"$e" image inspect "$IMAGE" >/dev/null 2>&1 || { say "no image $IMAGE: run make image"; return 1; }
	echo "image:  $IMAGE"
	"$e" image inspect --format 'id:     {{.Id}}
size:   {{.Size}} bytes
user:   {{.Config.User}}
entry:  {{json .Config.Entrypoint}} {{json .Config.Cmd}}
ports:  {{json .Config.ExposedPorts}}' "$IMAGE"
	echo "labels:"
	"$e" image inspect --format '{{range $k, $v := .Config.Labels}}  {{$k}}={{$v}}{{"\n"}}{{end}}' "$IMAGE" | sed '/^$/d'
	id=$("$e" create "$IMAGE")
	files=$("$e" export "$id" | tar --numeric-owner -tvf - | sort -k6) || true
	"$e" rm "$id" >/dev/null
	echo "files (mode, owner, size, path):"
	awk '{ printf "  %s %-11s %9s %s\n", $1, $2, $3, $6 }' <<<"$files"
	echo "shells and package managers (none expected):"
	if grep -E '(^|/)(sh|bash|ash|dash|busybox|apt|apt-get|dpkg|apk|yum|dnf|rpm)$' <<<"$files"; then
		return 1
	fi
	echo "  none"
}

case ${1:-} in
engine) engine ;;
build) build ;;
scan) scan ;;
*)
	echo "usage: $0 engine|build|scan" >&2
	exit 2
	;;
esac
