#!/usr/bin/env bash
# Makes a local certificate authority and certificates for Strata's TLS port (docs/OPERATING.md
# "TLS"). Needs the openssl CLI (Debian: openssl).
#
#   scripts/make-certs.sh DIR [NAME...]
#
# DIR gets (made if missing; an existing ca.pem/ca.key there is reused, so new node
# certificates chain to the CA clients already trust):
#   ca.pem, ca.key          the CA (10 years): clients get --tls-ca ca.pem; nodes get it as
#                           --tls-ca for mutual TLS
#   node.pem, node.key      a node certificate (825 days) for every NAME: an IPv4/IPv6 address
#                           becomes an IP SAN, anything else a DNS SAN (default: 127.0.0.1
#                           localhost); good for server and client authentication, so nodes
#                           with --tls-ca accept each other's anti-entropy and handoff
#   client.pem, client.key  a client certificate (825 days; CN strata-client) for mutual TLS
# Keys are EC P-256, readable by their owner only. Run it again to renew node and client
# certificates; send the node SIGHUP to load them.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 DIR [NAME...]" >&2; exit 2; }
dir=$1; shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(127.0.0.1 localhost)
command -v openssl >/dev/null || { echo "openssl is not installed (Debian: apt-get install openssl)" >&2; exit 2; }
mkdir -p "$dir"
cd "$dir"
umask 077

if [ ! -f ca.pem ] || [ ! -f ca.key ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem \
    -days 3650 -subj "/CN=Strata local CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

san=""
for n in "${names[@]}"; do
  if [[ $n =~ ^[0-9.]+$ || $n == *:* ]]; then san+="IP:$n,"; else san+="DNS:$n,"; fi
done
san=${san%,}

# sign NAME CN EXTENSIONS: NAME.key and NAME.pem signed by the CA.
sign() {
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$1.pem" -days 825 -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
sign node "${names[0]}" "subjectAltName=$san
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth"
sign client strata-client "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
chmod 644 ca.pem node.pem client.pem
echo "made in $PWD: ca.pem, node.pem/node.key ($san), client.pem/client.key"
