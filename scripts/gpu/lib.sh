# Sourced by scripts/gpu/bundle.sh and validate.sh.

# gpu_test_packages prints the package directories (./csrc, ./model, …)
# whose tests include a GPU test: a func TestXxxCUDAxxx(t *testing.T).
gpu_test_packages() {
	grep -rlE '^func Test[A-Za-z0-9_]*CUDA[A-Za-z0-9_]*\(t \*testing\.T\)' --include='*_test.go' . |
		xargs -n1 dirname | sort -u
}

# gpu_test_names prints the GPU tests' names.
gpu_test_names() {
	grep -rhoE '^func (Test[A-Za-z0-9_]*CUDA[A-Za-z0-9_]*)\(t \*testing\.T\)' --include='*_test.go' . |
		sed -E 's/^func (Test[A-Za-z0-9_]*)\(.*/\1/' | sort -u
}

# test_binary_name DIR: the file name a package's prebuilt test binary has
# (./trainer → trainer.test, ./internal/x → internal_x.test).
test_binary_name() {
	local d=${1#./}
	echo "${d//\//_}.test"
}

# name_test_binaries OUT PKG...: after `go test -c -o OUT/ PKG...` (which
# names a binary after its package's last element), renames each to
# test_binary_name and writes OUT/packages: "BINARY DIR" per package.
name_test_binaries() {
	local out=$1 p b
	shift
	for p in "$@"; do
		b=$(basename "$p").test
		[ ! -f "$out/$b" ] || [ "$b" = "$(test_binary_name "$p")" ] || mv "$out/$b" "$out/$(test_binary_name "$p")"
		echo "$(test_binary_name "$p") $p"
	done >"$out/packages"
}

# tree_sha256 prints a hash of the checkout as the device tool copies it
# (tracked and untracked-unignored files): the bundle's binaries are built
# from it, and make gpu-rehearsal makes the bundle again when it changed.
tree_sha256() {
	git ls-files -z -co --exclude-standard | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}
