# Install-time part of packaging/CMakeLists.txt: the systemd unit and /etc/default/mla name the
# paths of the install they belong to, which are known only now (`cmake --install --prefix P`,
# or cpack's /usr). Expects MLA_PACKAGING_DIR and MLA_PACKAGING_BUILD_DIR (set before it runs).
# The settings directory follows GNUInstallDirs: /etc for the /usr prefix, PREFIX/etc otherwise.
set(prefix "${CMAKE_INSTALL_PREFIX}")
if(prefix STREQUAL "/usr")
  set(MLA_SYSCONFDIR "/etc")
else()
  set(MLA_SYSCONFDIR "${prefix}/etc")
endif()
set(MLA_BINDIR "${prefix}/bin")
set(MLA_DOCDIR "${prefix}/share/doc/mla")
set(MLA_DEFAULTS_FILE "${MLA_SYSCONFDIR}/default/mla")
set(MLA_DEFAULT_MODEL "${prefix}/share/mla/models/tiny-q8_0.gguf")

set(out "${MLA_PACKAGING_BUILD_DIR}/install-${CMAKE_INSTALL_CONFIG_NAME}")
configure_file("${MLA_PACKAGING_DIR}/mla-serve.service.in" "${out}/mla-serve.service" @ONLY)
configure_file("${MLA_PACKAGING_DIR}/etc/default/mla" "${out}/mla" @ONLY)
# file(INSTALL) puts both under $DESTDIR, as install() rules do.
file(INSTALL "${out}/mla-serve.service" DESTINATION "${prefix}/lib/systemd/system"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
file(INSTALL "${out}/mla" DESTINATION "${MLA_SYSCONFDIR}/default"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
