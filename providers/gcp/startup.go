//go:build !omit_gcp

package gcp

import (
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/userdata"
)

// startupScriptKey is the metadata key the Compute Engine guest agent runs at every boot.
const startupScriptKey = "startup-script"

// startupScript is the credential script, run by the guest agent at every boot; the user's
// cloud-init goes unchanged under user-data.
func startupScript(c providers.Credentials) (string, error) { return userdata.CredentialScript(c) }
