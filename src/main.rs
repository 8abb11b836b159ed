fn main() {
    println!("rdma-ns skeleton");
}
