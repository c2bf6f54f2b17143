// crane v0.21.6 (go-containerregistry, the version Crossplane v2.3.4 itself uses): the
// control-plane tier's local OCI registry (`crane registry serve`) and the tool that pushes the
// function's and the provider's packages to it. Test infrastructure only (scripts/cluster-tools).
module workspace-sandbox.test/cluster/crane

go 1.26.0

tool github.com/google/go-containerregistry/cmd/crane

require (
	github.com/docker/cli v29.4.3+incompatible // indirect
	github.com/docker/docker-credential-helpers v0.9.3 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/google/go-containerregistry v0.21.6 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/klauspost/compress v1.18.6 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	golang.org/x/sync v0.20.0 // indirect
	golang.org/x/sys v0.44.0 // indirect
	gotest.tools/v3 v3.5.2 // indirect
)
