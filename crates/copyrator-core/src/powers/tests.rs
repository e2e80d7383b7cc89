use super::*;

/// SPEC §9.11 shows the table as it is here.
#[test]
fn the_spec_holds_the_table() {
    let spec = include_str!("../../../../docs/SPEC.md");
    let table = markdown_table();
    assert!(
        spec.contains(&table),
        "docs/SPEC.md §9.11 must hold the table of powers exactly as powers::markdown_table() renders it:\n{table}"
    );
}

/// Every author has one row, in the order of `Author::ALL`.
#[test]
fn every_author_has_one_row() {
    let authors: Vec<Author> = TABLE.iter().map(|(a, _)| *a).collect();
    assert_eq!(authors, Author::ALL.to_vec());
}

/// Only administrators' CopyRules take over an object copyrator does not manage, ask for
/// create-once copies or copy RBAC objects; only they and trusted namespaces read keystore
/// passwords from Secrets; only tenants' and hubs' rules need consent.
#[test]
fn only_administrators_hold_the_powers_that_reach_others_objects() {
    for (author, p) in TABLE {
        let admin = matches!(author, Author::CopyRule | Author::Template | Author::Bundle);
        assert_eq!(p.overwrite, admin, "{author:?} overwrite");
        assert_eq!(p.create_once, admin, "{author:?} createOnce");
        if p.rbac {
            assert!(admin, "{author:?} RBAC");
        }
        let tenant = matches!(
            author,
            Author::TenantInline | Author::TenantNamespaced | Author::Hub
        );
        assert_eq!(p.targets != Targets::Selected, tenant, "{author:?} targets");
        if tenant {
            assert!(!p.password_refs && p.own_namespace == OwnNamespace::Nothing);
        }
    }
}
