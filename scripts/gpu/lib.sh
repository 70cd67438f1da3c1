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

# tree_sha256 prints a hash of the checkout as the device tool copies it
# (tracked and untracked-unignored files): the bundle's binaries are built
# from it, and make gpu-rehearsal makes the bundle again when it changed.
tree_sha256() {
	git ls-files -z -co --exclude-standard | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}
