// Package buildinfo says which build of the projector is running, so that
// `projector version`, the start-up log line and the projector_build_info
// metric tell apart the versions that run side by side during a rolling
// upgrade or after a rollback.
package buildinfo

import (
	"fmt"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version, when set at link time, names the release; a build from a git
// checkout needs none, since Go stamps the module version from the tag or
// commit. Image builds, which have no .git, set it:
//
//	go build -ldflags "-X github.com/projector/projector/internal/buildinfo.version=v1.4.0 \
//	  -X github.com/projector/projector/internal/buildinfo.revision=0123abc" ./cmd/projector
//
// Both are written only by the linker.
var version, revision string

// Info is what a binary knows of its own build.
type Info struct {
	// Version is the release (v1.4.0), a pseudo-version of a commit, or
	// "(devel)" for a build that knows neither.
	Version string
	// Revision is the commit, with "-dirty" when the tree had changes.
	Revision  string
	GoVersion string
}

// Read returns the build of this binary.
func Read() Info {
	info := Info{Version: "(devel)", Revision: "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		info.GoVersion = bi.GoVersion
		if bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && info.Revision != "unknown" {
			info.Revision += "-dirty"
		}
	}
	if version != "" {
		info.Version = version
	}
	if revision != "" {
		info.Revision = revision
	}
	return info
}

// String is the line `projector version` prints.
func (i Info) String() string {
	return fmt.Sprintf("projector %s (commit %s, %s)", i.Version, i.Revision, i.GoVersion)
}

// Register adds projector_build_info to reg: a gauge that is always 1,
// whose labels carry the build, so a query can join it to any series of
// the same instance.
func Register(reg prometheus.Registerer, i Info) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "projector_build_info",
		Help: "Always 1; the labels name the running build (version, revision, goversion).",
	}, []string{"version", "revision", "goversion"})
	g.WithLabelValues(i.Version, i.Revision, i.GoVersion).Set(1)
	reg.MustRegister(g)
}
