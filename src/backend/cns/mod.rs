//! The vSphere CNS backend (SOAP over HTTPS).
