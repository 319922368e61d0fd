#!/bin/sh
# Makes the certificates of docker-compose.sasl-ssl.yml: a certificate authority of its
# own and, for each node tiercel-1..3, a private key with a certificate the authority
# signs. Nothing here is committed: run it once before the first `up`.
#
#   docker/make-certs.sh [DIRECTORY [EXTRA_SAN...]]
#
# DIRECTORY defaults to docker/certs (where the compose file mounts it from). Each node's
# certificate names tiercel-<n> (what the other nodes dial), localhost and 127.0.0.1
# (what clients on the host and the health check dial) and any EXTRA_SAN given, in
# openssl's subjectAltName syntax (DNS:kafka.example.com, IP:10.0.0.5).
#
# Written (PEM, the formats of KIP-651 that Tiercel and librdkafka read):
#   ca.pem            the authority's certificate: the trust store of nodes and clients
#   ca.key            the authority's key: keep it, or delete it once the nodes have theirs
#   tiercel-<n>.pem   node n's private key followed by its certificate: its key store
#                     (ssl.keystore.type PEM); it is also the node's client certificate
#                     towards the other nodes' controller listener
# An existing DIRECTORY/ca.key is reused, so that adding a node keeps the trust store.
set -eu

dir=${1:-$(dirname "$0")/certs}
[ $# -gt 0 ] && shift
days=825  # the longest validity macOS and browsers accept for a server certificate
mkdir -p "$dir"
umask 077

if [ ! -f "$dir/ca.key" ]; then
    openssl ecparam -name prime256v1 -genkey -noout -out "$dir/ca.key"
    openssl req -x509 -new -key "$dir/ca.key" -sha256 -days "$days" \
        -subj "/O=Tiercel example/CN=Tiercel example CA" -out "$dir/ca.pem"
fi

extra=""
for san in "$@"; do
    extra="$extra,$san"
done

for n in 1 2 3; do
    node="tiercel-$n"
    openssl ecparam -name prime256v1 -genkey -noout -out "$dir/$node.key"
    openssl req -new -key "$dir/$node.key" -subj "/O=Tiercel example/CN=$node" \
        -out "$dir/$node.csr"
    printf 'subjectAltName=DNS:%s,DNS:localhost,IP:127.0.0.1%s\nextendedKeyUsage=serverAuth,clientAuth\n' \
        "$node" "$extra" > "$dir/$node.ext"
    openssl x509 -req -in "$dir/$node.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -days "$days" -sha256 -extfile "$dir/$node.ext" -out "$dir/$node.crt"
    # The key store: the key (PKCS#8, unencrypted: the file is the secret) and its chain.
    openssl pkcs8 -topk8 -nocrypt -in "$dir/$node.key" -out "$dir/$node.pem"
    cat "$dir/$node.crt" >> "$dir/$node.pem"
    rm -f "$dir/$node.key" "$dir/$node.csr" "$dir/$node.ext" "$dir/$node.crt"
done
rm -f "$dir/ca.srl"
# The container's user (uid 1000, see Dockerfile) reads the key stores through the mount,
# whoever owns them on the host: they are readable by every user of this machine, which
# suits an example on one's own machine; for more, chown them to uid 1000 and chmod 0600.
chmod 0755 "$dir"
chmod 0644 "$dir/ca.pem" "$dir"/tiercel-*.pem
echo "certificates for tiercel-1..3 and their authority in $dir"
