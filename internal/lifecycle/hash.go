package lifecycle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

// SpecHash is the hash of everything that, when changed, replaces a Managed proxy's machine:
// placement (image included), the cloud-init content (not its reference) and the port.
func SpecHash(spec *v1.ProxySpec, cloudInit string) string {
	var placement v1.PlacementSpec
	if spec.Placement != nil {
		placement = *spec.Placement
	}
	port := spec.Port
	if port == 0 {
		port = v1.DefaultPort
	}
	b, _ := json.Marshal(struct {
		Placement v1.PlacementSpec `json:"p"`
		CloudInit string           `json:"c"`
		Port      int32            `json:"o"`
	}{placement, cloudInit, port})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}
