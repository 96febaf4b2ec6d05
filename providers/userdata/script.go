// Package userdata owns what a cloud VM boots with besides its image: the script that makes
// the machine's Squid demand the Proxy's credential, and the one user-data document that
// carries the user's cloud-init and that script together for clouds (EC2, Hetzner) that run
// nothing but user-data. It knows nothing of any cloud's API.
package userdata

import (
	"fmt"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/proxy-operator/proxy-operator/providers"
)

// Paths the credential script writes on the VM (Debian and Ubuntu Squid layout).
const (
	HtpasswdPath = "/etc/squid/proxy-operator.htpasswd"
	// authConfPath sits in conf.d, which Debian's and Ubuntu's squid.conf include before their
	// own http_access rules: its deny comes first whatever the cloud-init allows.
	authConfPath = "/etc/squid/conf.d/00-proxy-operator-auth.conf"
	ncsaAuth     = "/usr/lib/squid/basic_ncsa_auth"
)

// AuthConfig is the squid.conf fragment that makes Squid demand the credential in htpasswd.
func AuthConfig(htpasswd string) string {
	return fmt.Sprintf(`auth_param basic program %s %s
auth_param basic children 5 startup=1 idle=1
auth_param basic realm proxy-operator
auth_param basic credentialsttl 60 seconds
acl proxy_operator_auth proxy_auth REQUIRED
http_access deny !proxy_operator_auth
`, ncsaAuth, htpasswd)
}

// CredentialScript is the shell script that installs the credential (as a bcrypt htpasswd
// line: the password itself never enters instance metadata or user-data, which anyone allowed
// to read the instance can see) and the fragment that demands it, waits for the Squid that
// cloud-init installs, and reloads it. It rewrites its files each time it runs, so it is safe
// at every boot (GCP's startup script) as well as once (a cloud-init user script).
func CredentialScript(c providers.Credentials) (string, error) {
	// The least cost: see credentials.BcryptCost (the password is 128 random bits).
	hash, err := bcrypt.GenerateFromPassword([]byte(c.Password), bcrypt.MinCost)
	if err != nil {
		return "", fmt.Errorf("hash credential: %w", err)
	}
	line := c.Username + ":" + string(hash)
	if strings.ContainsAny(line, "\n'") {
		return "", fmt.Errorf("credential username holds a newline or quote")
	}
	return fmt.Sprintf(`#!/bin/sh
# proxy-operator: Squid on this machine demands the Proxy's credential (HTTP Basic).
set -eu
umask 027
mkdir -p /etc/squid/conf.d
printf '%%s\n' '%s' > %s
cat > %s <<'PROXY_OPERATOR_AUTH'
%sPROXY_OPERATOR_AUTH
i=0
until [ -x /usr/sbin/squid ]; do
  i=$((i + 1)); [ "$i" -le 120 ] || { echo "proxy-operator: squid not installed after 10 minutes" >&2; exit 1; }
  sleep 5
done
chgrp proxy %s && chmod 0640 %s
chmod 0644 %s
systemctl reload squid 2>/dev/null || systemctl restart squid
`, line, HtpasswdPath, authConfPath, AuthConfig(HtpasswdPath), HtpasswdPath, HtpasswdPath, authConfPath), nil
}
