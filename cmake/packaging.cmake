# The Debian package, built by CPack: `cmake --build build --target package` (or `cpack` in
# build/) writes build/outbox-relay_<version>_amd64.deb. It holds the binary (/usr/bin), the
# docs, the systemd unit (/lib/systemd/system/outbox-relay.service) and its environment file
# (/etc/default/outbox-relay, a conffile, mode 0600) and its secrets (/etc/outbox-relay/pgpass,
# kafka.properties and nats.creds, conffiles, mode 0600), loaded as systemd credentials. Installed and removed by tests/package.
#
# The unit and the environment file are the package's alone (component `systemd`, excluded
# from a plain `cmake --install`): their paths are those of a Debian system, not of a --prefix.
install(FILES ${PROJECT_SOURCE_DIR}/packaging/outbox-relay.service
        DESTINATION /lib/systemd/system COMPONENT systemd EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/outbox-relay.default
        DESTINATION /etc/default RENAME outbox-relay
        PERMISSIONS OWNER_READ OWNER_WRITE COMPONENT systemd EXCLUDE_FROM_ALL)
# The unit's secrets, loaded as systemd credentials (LoadCredential=): root-only conffiles.
install(FILES ${PROJECT_SOURCE_DIR}/packaging/pgpass ${PROJECT_SOURCE_DIR}/packaging/kafka.properties
              ${PROJECT_SOURCE_DIR}/packaging/nats.creds
        DESTINATION /etc/outbox-relay
        PERMISSIONS OWNER_READ OWNER_WRITE COMPONENT systemd EXCLUDE_FROM_ALL)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME outbox-relay)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "outbox-relay maintainers <outbox-relay@example.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "relays a PostgreSQL transactional outbox table to Kafka through logical replication")
set(CPACK_PACKAGE_DESCRIPTION
    "outbox-relay tails the write-ahead log through a pgoutput logical replication slot and\n\
publishes committed inserts into an outbox table to Kafka in commit order, confirming the\n\
slot only after Kafka acknowledged every event up to it.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
# One package from both components: the runtime (binary, docs) and the systemd files.
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_COMPONENTS_ALL Unspecified systemd)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Depends from the libraries the binary links (libpq5, librdkafka1, ...), by dpkg-shlibdeps.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/conffiles ${PROJECT_SOURCE_DIR}/packaging/postinst
    ${PROJECT_SOURCE_DIR}/packaging/prerm ${PROJECT_SOURCE_DIR}/packaging/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
